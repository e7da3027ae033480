"""Which agent session a tool call came from, read from the request's `_meta`.

Codex puts its thread in every `tools/call`: `_meta.threadId`, and again in
`_meta["x-codex-turn-metadata"].thread_id` (with `turn_id`). Claude Code sends only
`claudecode/toolUseId`; its PreToolUse hook (`fedhpc hook pre-tool-use`) reports the same id
with the session's id, cwd and transcript to the daemon, which joins them at submit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["AgentSession", "agent_session", "claude_tool_use_id"]

_MAX_ID = 200


class AgentSession(BaseModel):
    """The agent conversation to resume when a task needs it."""

    model_config = ConfigDict(frozen=True)

    client: Literal["codex"]
    thread_id: str
    turn_id: str | None = None


def _text(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= _MAX_ID and value.isprintable():
        return value
    return None


def agent_session(meta: Mapping[str, Any] | None) -> AgentSession | None:
    """The Codex thread of a `tools/call`, or None when the caller did not say (never raises)."""
    if not isinstance(meta, Mapping):
        return None
    turn = meta.get("x-codex-turn-metadata")
    turn = turn if isinstance(turn, Mapping) else {}
    thread = _text(meta.get("threadId")) or _text(turn.get("thread_id"))
    if thread is None:
        return None
    return AgentSession(client="codex", thread_id=thread, turn_id=_text(turn.get("turn_id")))


def claude_tool_use_id(meta: Mapping[str, Any] | None) -> str | None:
    """The Claude Code tool call's id (`_meta["claudecode/toolUseId"]`), or None."""
    if not isinstance(meta, Mapping):
        return None
    return _text(meta.get("claudecode/toolUseId"))
