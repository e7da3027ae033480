"""What every tool call needs: the daemon link, who is calling (the key of a submission) and
who to wake when the work ends (else why nobody, told truthfully in the answer)."""

from __future__ import annotations

import os
import uuid
from typing import Any, TypeVar

import structlog
from mcp.server.mcpserver import Context
from pydantic import ValidationError

from fedhpc.client.wire import ACTING_FOR
from fedhpc.mcp_server.link import DaemonLink
from fedhpc.mcp_server.session_meta import agent_session, claude_tool_use_id
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.data import TransferHandle
from fedhpc.ops.task_views import GroupView, TaskHandle
from fedhpc.settings import CONTINUATION

__all__ = [
    "UNBOUND",
    "Ctx",
    "continuation_for",
    "daemon_link",
    "submission_fields",
    "with_unbound_note",
]

log = structlog.get_logger(__name__)

Ctx = Context[DaemonLink, Any]


def daemon_link(ctx: Ctx) -> DaemonLink:
    link: DaemonLink = ctx.request_context.lifespan_context
    return link


def _client_name(ctx: Ctx) -> str | None:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) else None


# This server process: a caller scope when the client names no session of its own.
_INSTANCE = uuid.uuid4().hex[:12]


def submission_fields(ctx: Ctx, key: str | None, wake: ContinuationSpec | None) -> dict[str, Any]:
    """Who asks and under which key. Every submit carries a key: the caller's, else one made
    for this call, so that an answer lost on the way back can be retried safely with it (it is
    named in the `accepted_unknown` error). A made key still lets the daemon's retry window
    recognise the same arguments sent again by the same caller: the agent session when it is
    known, else this server process (and its HTTP session)."""
    connection = getattr(ctx.request_context, "session_id", None)  # HTTP; None on stdio
    session = wake.session_id if wake is not None else None
    caller = (
        f"{wake.runtime.value}:{session}"
        if wake is not None and session
        else f"serve:{_INSTANCE}:{connection or 'stdio'}"
    )
    return {
        "idempotency_key": f"mcp-{uuid.uuid4().hex}" if key is None else key,
        "key_generated": key is None,
        "caller": caller[:200],
    }


_A = TypeVar("_A", TaskHandle, GroupView, TransferHandle)
UNBOUND = (
    "fedhpc will NOT resume this session: {why}. Do not end your turn waiting for it: "
    "{check} when you need the outcome. Fix for next time: {fix}"
)
_HOOK_FIX = (
    "install fedhpc's PreToolUse hook (`fedhpc hook pre-tool-use`, docs/continuation.md) and "
    "start a new session."
)


# Why a signed-in caller of the service is woken by nobody here (docs/service.md).
SERVICE_UNBOUND = "this is a shared fedhpc service: it cannot resume a session on your machine"
_SERVICE_FIX = "follow your work with list_events, or subscribe to its resource."


async def continuation_for(ctx: Ctx, tool: str) -> tuple[ContinuationSpec | None, str | None]:
    """Who to wake when the work ends, fixed now (never guessed later), else why nobody. In
    order: the FEDHPC_CONTINUATION the server was started with (a JSON ContinuationSpec, for
    scripted agents); the Codex thread named in every tools/call; the Claude Code session that
    the PreToolUse hook reported for this very tool call (`_meta["claudecode/toolUseId"]`)."""
    configured = CONTINUATION.read()
    if configured:
        try:
            return ContinuationSpec.model_validate_json(configured), None
        except ValidationError:
            log.warning("FEDHPC_CONTINUATION is not a valid continuation", tool=tool)
            return None, "FEDHPC_CONTINUATION is not a valid continuation spec"
    if ACTING_FOR.get() is not None:
        # Service mode: the caller's agent runs on their machine, not here; a Codex thread id
        # or Claude session it names would be resumed on the service's host, as its user.
        return None, SERVICE_UNBOUND
    meta = ctx.request_context.meta
    session = agent_session(meta)
    if session is not None:
        try:
            spec = ContinuationSpec(
                runtime=Runtime.CODEX, session_id=session.thread_id, cwd=os.getcwd()
            )
        except ValidationError:
            log.warning("unusable codex thread id", tool=tool, thread_id=session.thread_id[:64])
            return None, "Codex sent an unusable thread id"
        return spec, None
    if _client_name(ctx) != "claude-code":
        return None, "this client does not say which session it is"
    use_id = claude_tool_use_id(meta)
    if use_id is None:
        return None, "Claude Code sent no tool-call id"
    binding = await daemon_link(ctx).call(lambda c: c.binding(use_id))
    if binding is None:
        return None, "no PreToolUse hook reported this call's session"
    spec = ContinuationSpec(
        runtime=Runtime.CLAUDE_CODE,
        session_id=binding.session_id,
        cwd=binding.cwd,
        transcript=binding.transcript_path,
    )
    return spec, None


def with_unbound_note(answer: _A, why: str | None, subject: str) -> _A:
    """The submit answer tells the truth when no session will be resumed."""
    if why is None:
        return answer
    if isinstance(answer, TransferHandle) and answer.state.terminal:
        return answer  # its outcome is in the answer: nothing to wait for
    fix = _HOOK_FIX if "hook" in why or "Claude" in why else "see docs/continuation.md."
    if why == SERVICE_UNBOUND:
        fix = _SERVICE_FIX
    if isinstance(answer, TransferHandle):
        check = f"read resource fedhpc://transfers/{subject}"
        text = UNBOUND.format(why=why, check=check, fix=fix)
    else:  # the daemon's `next` already fits a task or group nobody resumes; add why and fix
        text = f"{answer.next} (fedhpc will NOT resume this session: {why}. Fix: {fix})"
    return answer.model_copy(update={"next": text})
