"""The tools: flat, described parameters in; the contract's models (`fedhpc.ops`) out.

Each tool builds the contract's request model, so the daemon and the CLI validate the same way,
and calls the daemon. `guarded` turns every failure into a typed `{code, message, hint}`."""

from __future__ import annotations

import os
import uuid
from typing import Annotated, Any, Literal, TypeVar

import structlog
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedhpc.domain.envelope import Arch, DraftSource
from fedhpc.mcp_server.link import DaemonLink
from fedhpc.mcp_server.params import (
    Adapt,
    Argv,
    Env,
    Envelope,
    GroupAdapt,
    GroupEnvelope,
    GroupIdemKey,
    IdemKey,
    OtherEnvelope,
    Policy,
    TaskId,
    Workdir,
)
from fedhpc.mcp_server.results import guarded
from fedhpc.mcp_server.session_meta import agent_session, claude_tool_use_id
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.data import MoveDataRequest, SyncLevel, TransferHandle, TransferMode
from fedhpc.ops.draft import DraftRequest, EnvelopeDraft
from fedhpc.ops.events import check_consumer
from fedhpc.ops.inspect import FederationView, InspectRequest
from fedhpc.ops.tasks import (
    PREVIEW_BYTES,
    AdaptationPolicy,
    CancelRequest,
    GroupChild,
    GroupView,
    ReplanRequest,
    ResultManifest,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
    TaskHandle,
)
from fedhpc.placement.draft import (
    MAX_CODE_CONTEXT_CHARS,
    MAX_CODE_CONTEXT_ITEMS,
    MAX_DESCRIPTION_CHARS,
)
from fedhpc.placement.policy import PolicyKind
from fedhpc.settings import CONTINUATION

__all__ = ["ANNOTATIONS", "TOOLS", "TRANSFER_EVENTS", "AckAnswer", "EventView", "EventsPage"]

log = structlog.get_logger(__name__)

Ctx = Context[DaemonLink, Any]
SEQ_MAX = 2**53  # event sequence numbers: JSON-safe, and inside SQLite's 64-bit integers


def _link(ctx: Ctx) -> DaemonLink:
    link: DaemonLink = ctx.request_context.lifespan_context
    return link


def _client_name(ctx: Ctx) -> str | None:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) else None


# This server process: a caller scope when the client names no session of its own.
_INSTANCE = uuid.uuid4().hex[:12]


def _submission(ctx: Ctx, key: str | None, wake: ContinuationSpec | None) -> dict[str, Any]:
    """Who asks and under which key. Every submit carries a key: the caller's, else one made
    for this call, so that an answer lost on the way back can be retried safely with it (it is
    named in the `accepted_unknown` error). A made key still lets the daemon's retry window
    recognise the same arguments sent again by the same caller: the agent session when it is
    known, else this server process (and its HTTP session)."""
    connection = getattr(ctx.request_context, "session_id", None)  # HTTP; None on stdio
    session = wake.session_id if wake is not None else None
    caller = (
        f"{wake.runtime.value}:{session}" if wake is not None and session
        else f"serve:{_INSTANCE}:{connection or 'stdio'}"
    )  # fmt: skip
    return {
        "idempotency_key": key or f"mcp-{uuid.uuid4().hex}",
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


async def _continuation(ctx: Ctx, tool: str) -> tuple[ContinuationSpec | None, str | None]:
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
    binding = await _link(ctx).call(lambda c: c.binding(use_id))
    if binding is None:
        return None, "no PreToolUse hook reported this call's session"
    spec = ContinuationSpec(runtime=Runtime.CLAUDE_CODE, session_id=binding.session_id,
                            cwd=binding.cwd, transcript=binding.transcript_path)  # fmt: skip
    return spec, None


def _unbound(answer: _A, why: str | None, subject: str) -> _A:
    """The submit answer tells the truth when no session will be resumed."""
    if why is None:
        return answer
    if isinstance(answer, TransferHandle) and answer.state.terminal:
        return answer  # its outcome is in the answer: nothing to wait for
    fix = _HOOK_FIX if "hook" in why or "Claude" in why else "see docs/continuation.md."
    if isinstance(answer, TransferHandle):
        check = f"read resource fedhpc://transfers/{subject}"
        text = UNBOUND.format(why=why, check=check, fix=fix)
    else:  # the daemon's `next` already fits a task or group nobody resumes; add why and fix
        text = f"{answer.next} (fedhpc will NOT resume this session: {why}. Fix: {fix})"
    return answer.model_copy(update={"next": text})


@guarded("Filter with sites=[...], accelerator or arch, or read resource fedhpc://federation.")
async def inspect_federation(
    ctx: Ctx,
    *,
    sites: Annotated[list[str], Field(description="only these sites; empty = all")] = [],  # noqa: B006 (never mutated)
    accelerator: Annotated[
        str | None, Field(description="only this accelerator, e.g. a100")
    ] = None,
    arch: Annotated[Arch | None, Field(description="only this CPU architecture")] = None,
    include_blocked: Annotated[bool, Field(description="also list blocked partitions")] = False,
    refresh: Annotated[bool, Field(description="probe every site now (slower)")] = False,
) -> FederationView:
    """Observe: each site's health, freshness, partitions, free GPUs/CPUs, queues and credit.
    Start here."""
    req = InspectRequest(
        sites=tuple(sites), accelerator=accelerator, arch=arch, include_blocked=include_blocked
    )
    return await _link(ctx).call(lambda c: c.refresh(req) if refresh else c.federation(req))


@guarded()
async def draft_envelope(
    ctx: Ctx,
    *,
    description: Annotated[
        str, Field(description="what the task does, in words", max_length=MAX_DESCRIPTION_CHARS)
    ],
    code_context: Annotated[
        list[str],
        Field(
            description=f"code snippets or command lines (not paths); "
            f"{MAX_CODE_CONTEXT_CHARS} chars in all",
            max_length=MAX_CODE_CONTEXT_ITEMS,
        ),
    ] = [],  # noqa: B006
    proposed: Annotated[
        dict[str, Any] | None, Field(description="your own envelope to check")
    ] = None,
    source: Annotated[
        Literal["user", "assistant"] | None, Field(description="who wrote `proposed`")
    ] = None,
    rationale: Annotated[str, Field(description="why these bounds", max_length=4000)] = "",
    confidence: Annotated[float | None, Field(description="0..1", ge=0, le=1)] = None,
) -> EnvelopeDraft:
    """Plan: draft min-viable/max-useful bounds from a description and code, or check
    yours; pass its `envelope` to submit_task."""
    req = DraftRequest(
        description=description,
        code_context=tuple(code_context),
        proposed=proposed,
        source=DraftSource(source) if source else None,
        rationale=rationale,
        confidence=confidence,
    )
    return await _link(ctx).call(lambda c: c.draft_envelope(req))


@guarded()
async def submit_task(
    ctx: Ctx,
    *,
    command: Argv,
    envelope: Envelope,
    name: str | None = None,
    policy: Policy = None,
    fixed_site: Annotated[
        str | None, Field(description="run only here (implies policy fixed-site)")
    ] = None,
    fallback: Annotated[
        bool, Field(description="fixed_site may fall back; decision says so")
    ] = False,
    workdir: Workdir = None,
    env: Env = {},  # noqa: B006
    container_image: str | None = None,
    outputs: Annotated[list[str], Field(description="files it writes, relative")] = [],  # noqa: B006
    task_budget: Annotated[float | None, Field(description="credits for this task")] = None,
    adaptation: Adapt = None,
    stage_in: Annotated[list[str], Field(description="transfer ids to wait for")] = [],  # noqa: B006
    idempotency_key: IdemKey = None,
) -> TaskHandle:
    """Act: place one job within `envelope` on the best feasible site. Then do what the
    answer's `next` says."""
    wake, unbound = await _continuation(ctx, "submit_task")
    req = SubmitTaskRequest.model_validate(
        {
            "command": command,
            "envelope": envelope,
            "name": name,
            "policy": policy,
            "fixed_site": fixed_site,
            "fallback": fallback,
            "workdir": workdir,
            "env": env,
            "container_image": container_image,
            "outputs": outputs,
            "task_budget": task_budget,
            "adaptation": adaptation or AdaptationPolicy(),
            "stage_in": stage_in,
            "continuation": wake,
            **_submission(ctx, idempotency_key, wake),
        }
    )
    handle = await _link(ctx).call(lambda c: c.submit_task(req))
    return _unbound(handle, unbound, handle.task_id)


@guarded("Read resource fedhpc://groups/{group_id} for the whole group.")
async def submit_group(
    ctx: Ctx,
    *,
    objective: Annotated[str, Field(description="what the group achieves together")],
    children: Annotated[list[GroupChild], Field(min_length=1)],
    envelope: GroupEnvelope,
    policy: PolicyKind = PolicyKind.BEST_FEASIBLE,
    spread: Annotated[bool, Field(description="prefer distinct systems")] = True,
    workdir: str | None = None,
    env: dict[str, str] = {},  # noqa: B006
    adaptation: GroupAdapt = None,
    idempotency_key: GroupIdemKey = None,
) -> GroupView:
    """Act: related jobs (a sweep) under one objective and envelope. Then do what the
    answer's `next` says."""
    wake, unbound = await _continuation(ctx, "submit_group")
    req = SubmitGroupRequest.model_validate(
        {
            "objective": objective,
            "children": children,
            "envelope": envelope,
            "policy": policy,
            "spread": spread,
            "workdir": workdir,
            "env": env,
            "adaptation": adaptation or AdaptationPolicy(),
            "continuation": wake,
            **_submission(ctx, idempotency_key, wake),
        }
    )
    view = await _link(ctx).call(lambda c: c.submit_group(req))
    return _unbound(view, unbound, view.group_id)


@guarded("Lower max_bytes, or read resource fedhpc://tasks/{task_id}.")
async def get_result(
    ctx: Ctx,
    *,
    task_id: TaskId,
    preview: Annotated[
        Literal["stdout", "stderr", "none"] | None,
        Field(description="default stdout"),
    ] = None,
    max_bytes: Annotated[int, Field(ge=1, le=65536, description="per tail")] = PREVIEW_BYTES,
) -> ResultManifest:
    """Resume: a task's state, attempts, outputs by reference, the last bytes of stdout
    (`preview`) and, if it failed, of stderr. Do not poll."""
    req = ResultRequest(task_id=task_id, preview=preview, max_bytes=max_bytes, brief=True)
    return await _link(ctx).call(lambda c: c.get_result(req))


@guarded()
async def replan(
    ctx: Ctx,
    *,
    task_id: TaskId,
    exclude_sites: Annotated[list[str], Field(description="sites not to use")] = [],  # noqa: B006
    envelope: OtherEnvelope = None,
) -> TaskHandle:
    """Decide: re-place a task that has not started, or an unschedulable one (exclude sites,
    change its envelope); no work is lost."""
    req = ReplanRequest(task_id=task_id, exclude_sites=tuple(exclude_sites), envelope=envelope)
    return await _link(ctx).call(lambda c: c.replan(req))


@guarded()
async def cancel(ctx: Ctx, *, task_id: TaskId) -> TaskHandle:
    """Decide: cancel a task; its job is killed and its work lost."""
    req = CancelRequest(task_id=task_id)
    return await _link(ctx).call(lambda c: c.cancel(req))


# A transfer's own outcomes; a transfer that a task waits for raises none (the task's does).
TRANSFER_EVENTS = ("transfer.succeeded", "transfer.failed", "transfer.blocked")


@guarded()
async def move_data(
    ctx: Ctx,
    *,
    source: Annotated[str, Field(description="site:root/path, e.g. delta:work/in.dat")],
    destination: Annotated[str, Field(description="site:root/path")],
    mode: TransferMode = TransferMode.REPLICATE,
    recursive: Annotated[bool, Field(description="source is a folder")] = False,
    sync_level: Annotated[SyncLevel | None, Field(description="skip existing files")] = None,
    verify_checksum: bool = True,
    idempotency_key: GroupIdemKey = None,
) -> TransferHandle:
    """Act: copy files site to site, never through you. Then follow `next`, or pass
    transfer_id to submit_task's stage_in."""
    spec, unbound = await _continuation(ctx, "move_data")
    wake = spec.model_copy(update={"events": TRANSFER_EVENTS}) if spec is not None else None
    req = MoveDataRequest.model_validate(
        {
            "source": source,
            "destination": destination,
            "mode": mode,
            "recursive": recursive,
            "sync_level": sync_level,
            "verify_checksum": verify_checksum,
            "idempotency_key": idempotency_key,
            "continuation": wake,  # stored with the transfer: no outcome can come before it
        }
    )
    handle = await _link(ctx).call(lambda c: c.move_data(req))
    where = f"fedhpc://transfers/{handle.transfer_id}"
    if handle.state.terminal:
        return handle.model_copy(update={"next": f"Already {handle.state.value}: read {where}."})
    if spec is None:
        return _unbound(handle, unbound, handle.transfer_id)
    return handle


class EventView(BaseModel):
    """One fact from the event log."""

    model_config = ConfigDict(frozen=True)

    seq: int
    id: str
    kind: str
    subject: str
    created_at: str
    payload: dict[str, Any]


class EventsPage(BaseModel):
    model_config = ConfigDict(frozen=True)

    events: list[EventView]
    next_after: int = Field(description="pass as `after` for the next page")
    more: bool


class AckAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    consumer: str
    cursor: int


@guarded("Use a smaller limit.")
async def list_events(
    ctx: Ctx,
    *,
    after: Annotated[int, Field(ge=0, le=SEQ_MAX, description="the last seq already seen")] = 0,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
    consumer: Annotated[
        str | None, Field(max_length=64, description="skip what it acknowledged")
    ] = None,
) -> EventsPage:
    """Pull clients: events after `after` (task ended, decision needed, site offline);
    old ones no consumer holds get archived."""
    rows = await _link(ctx).call(
        lambda c: c.events(after=after, limit=limit + 1, consumer=consumer)
    )
    events = [EventView.model_validate(r) for r in rows[:limit]]
    return EventsPage(
        events=events, next_after=events[-1].seq if events else after, more=len(rows) > limit
    )


@guarded()
async def ack_events(
    ctx: Ctx,
    *,
    consumer: Annotated[str, Field(min_length=1, max_length=64, description="your client name")],
    through: Annotated[int, Field(ge=0, le=SEQ_MAX, description="the last seq you handled")],
) -> AckAnswer:
    """Pull clients: mark events up to `through` handled for `consumer`."""
    check_consumer(consumer)
    cursor = await _link(ctx).call(lambda c: c.ack_events(consumer, through))
    return AckAnswer(consumer=consumer, cursor=cursor)


def _hints(read_only: bool, destructive: bool, idempotent: bool, world: bool) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=world,
    )


# Honest annotations (see docs/mcp.md): submissions and move_data are idempotent through their
# key, replan keeps all work done (only a queued attempt moves), cancel kills work. move_data
# writes only its destination path, and sync_level decides what it skips there.
ANNOTATIONS: dict[str, ToolAnnotations] = {
    "inspect_federation": _hints(True, False, True, True),
    "draft_envelope": _hints(True, False, True, False),
    "submit_task": _hints(False, False, True, True),
    "submit_group": _hints(False, False, True, True),
    "get_result": _hints(True, False, True, True),
    "replan": _hints(False, False, False, True),
    "cancel": _hints(False, True, True, True),
    "move_data": _hints(False, False, True, True),
    "list_events": _hints(True, False, True, False),
    "ack_events": _hints(False, False, True, False),
}

TOOLS = (
    inspect_federation,
    draft_envelope,
    submit_task,
    submit_group,
    get_result,
    replan,
    cancel,
    move_data,
    list_events,
    ack_events,
)
