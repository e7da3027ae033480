"""Continuations: who to wake, how, and for which events; and what a hook reports."""

from __future__ import annotations

import hashlib
import json
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
    "ToolBinding",
    "continuation_id",
]

# Results and unresolved exceptions: what a waiting agent must hear about.
DEFAULT_WAKE_EVENTS: tuple[str, ...] = (
    "task.terminal",
    "task.retry_exhausted",
    "task.unschedulable",
    "task.stage_in_failed",
    "task.stage_in_blocked",
    "task.site_lost",
    "task.waiting_for_site",
    "group.round_terminal",
    "group.stalled_child",
    "group.site_lost",
    "group.waiting_for_site",
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
        default=None,
        max_length=128,
        pattern=_SESSION,
        description="Claude session id / Codex thread id, fixed when the work was submitted",
    )
    cwd: str | None = Field(
        default=None, max_length=1024, pattern=_PATH, description="the session's folder"
    )
    transcript: str | None = Field(
        default=None,
        max_length=1024,
        pattern=_PATH,
        description="the session's own record (Claude transcript), checked before a retry",
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
            Runtime.CLAUDE_CODE: ("session_id", self.session_id),
        }
        if self.runtime in need and not need[self.runtime][1]:
            raise ValueError(f"runtime {self.runtime.value} needs {need[self.runtime][0]}")
        if self.runtime is Runtime.CLAUDE_CODE and not self.cwd:
            raise ValueError("runtime claude-code needs cwd (a Claude session resumes there)")
        for i, arg in enumerate(self.command):
            if "\x00" in arg:
                raise ValueError(f"command[{i}] contains NUL")
        return self


def continuation_id(subject: str, spec: ContinuationSpec) -> str:
    """The row id of `spec` on `subject`: the same spec registered again is the same row."""
    body = spec.model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]
    return f"c{subject}-{digest}"


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
    last_error: str | None = Field(description="the last failure: the CLI's stdout/stderr tails")
    updated_at: datetime
    payload_bytes: int
    event: str | None = Field(default=None, description="the event kind")
    subject: str | None = None
    session: str | None = Field(default=None, description="runtime:session resumed")
    resume: str | None = Field(default=None, description="the resume (batch) that carried it")
    tools_verified: bool | None = Field(
        default=None, description="the resumed turn had fedhpc's tools (claude-code)"
    )


class ToolBinding(BaseModel):
    """What Claude Code's PreToolUse hook sends for a fedhpc tool call (its stdin JSON, unknown
    keys ignored): the call's `tool_use_id` names the session that made it. The MCP server
    sees the same id in `_meta["claudecode/toolUseId"]`, so a submit is bound to its session
    exactly, even with several sessions in one folder."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    tool_use_id: str = Field(min_length=1, max_length=200, pattern=_SESSION)
    session_id: str = Field(max_length=128, pattern=_SESSION)
    cwd: str = Field(max_length=1024, pattern=_PATH)
    transcript_path: str | None = Field(default=None, max_length=1024, pattern=_PATH)
    tool_name: str | None = Field(default=None, max_length=200)
