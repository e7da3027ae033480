"""The tools: flat, described parameters in; the contract's models (`fedhpc.ops`) out.

Each tool builds the contract's request model, so the daemon and the CLI validate the same way,
and calls the daemon. `guarded` turns every failure into a typed `{code, message, hint}`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import structlog
from mcp_types import ToolAnnotations
from pydantic import Field

from fedhpc.domain.envelope import Arch, DraftSource
from fedhpc.mcp_server.calls import (
    Ctx,
    continuation_for,
    daemon_link,
    submission_fields,
    with_unbound_note,
)
from fedhpc.mcp_server.event_tools import ack_events, list_events
from fedhpc.mcp_server.params import (
    Adapt,
    Env,
    GroupAdapt,
    GroupEnvelope,
    GroupPolicy,
    IdemKey,
    OptArgv,
    OptEnvelope,
    OtherEnvelope,
    Policy,
    Script,
    TaskId,
    Workdir,
)
from fedhpc.mcp_server.results import check_fields, guarded, project
from fedhpc.ops.data import MoveDataRequest, SyncLevel, TransferHandle, TransferMode
from fedhpc.ops.draft import DraftRequest, EnvelopeDraft
from fedhpc.ops.inspect import FederationView, InspectRequest, SiteView
from fedhpc.ops.scripts import is_script_path
from fedhpc.ops.task_views import GroupView, ResultManifest, SubmitAnswer, TaskHandle
from fedhpc.ops.tasks import (
    PREVIEW_BYTES,
    AdaptationPolicy,
    CancelRequest,
    GroupChild,
    ReplanRequest,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)
from fedhpc.placement.draft import (
    MAX_CODE_CONTEXT_CHARS,
    MAX_CODE_CONTEXT_ITEMS,
    MAX_DESCRIPTION_CHARS,
)
from fedhpc.placement.policy import PolicyKind

__all__ = ["ANNOTATIONS", "TOOLS", "TRANSFER_EVENTS"]

log = structlog.get_logger(__name__)


async def _script_text(ctx: Ctx, script: str | None) -> str | None:
    """`script` as text: a path is read from the storage root of the site that holds it."""
    if script is None or not is_script_path(script):
        return script
    path = script
    got = await daemon_link(ctx).call(lambda c: c.read_script(path))
    return got.text


@guarded("Filter with sites=[...], accelerator or arch, or read resource fedhpc://federation.")
async def inspect_federation(
    ctx: Ctx,
    *,
    sites: list[str] = [],  # noqa: B006 (never mutated)
    accelerator: Annotated[str | None, Field(description="e.g. a100")] = None,
    arch: Arch | None = None,
    include_blocked: bool = False,
    refresh: Annotated[bool, Field(description="probe every site now (slower)")] = False,
    fields: Annotated[list[str], Field(description="only these site fields")] = [],  # noqa: B006
) -> FederationView:
    """Start here: each site's health, partitions, free GPUs/CPUs, queues, credit."""
    req = InspectRequest(
        sites=tuple(sites), accelerator=accelerator, arch=arch, include_blocked=include_blocked
    )
    check_fields(SiteView, fields)  # before asking: a misspelt field is never a silent no-op
    got = await daemon_link(ctx).call(lambda c: c.refresh(req) if refresh else c.federation(req))
    if not fields:
        return got
    kept = [*fields, "suspect"]  # a site to avoid now says so, like `health`, whatever `fields`
    return got.model_copy(update={"sites": tuple(project(s, kept) for s in got.sites)})


@guarded()
async def draft_envelope(
    ctx: Ctx,
    *,
    description: Annotated[
        str, Field(max_length=MAX_DESCRIPTION_CHARS)
    ] = "",  # may be left out with a `script`
    code_context: Annotated[
        list[str],
        Field(
            description=f"snippets, not paths; {MAX_CODE_CONTEXT_CHARS} chars in all",
            max_length=MAX_CODE_CONTEXT_ITEMS,
        ),
    ] = [],  # noqa: B006
    proposed: dict[str, Any] | None = None,
    source: Annotated[
        Literal["user", "assistant"] | None, Field(description="who wrote `proposed`")
    ] = None,
    rationale: Annotated[str, Field(description="why these bounds", max_length=4000)] = "",
    confidence: Annotated[float | None, Field(ge=0, le=1)] = None,
    script: str | None = None,
) -> EnvelopeDraft:
    """Draft an envelope from a description and code, or check `proposed` or a job
    `script`; pass its `envelope` to submit_task."""
    script = await _script_text(ctx, script)
    req = DraftRequest.model_validate(
        {
            "description": description,
            "code_context": tuple(code_context),
            "proposed": proposed,
            "source": DraftSource(source) if source else None,
            "rationale": rationale,
            "confidence": confidence,
            "script": script,
        }
    )
    return await daemon_link(ctx).call(lambda c: c.draft_envelope(req))


@guarded()
async def submit_task(
    ctx: Ctx,
    *,
    command: OptArgv = None,
    envelope: OptEnvelope = None,
    script: Script = None,
    name: str | None = None,
    policy: Policy = None,
    fixed_site: str | None = None,
    fallback: Annotated[bool, Field(description="fixed_site may fall back")] = False,
    workdir: Workdir = None,
    env: Env = {},  # noqa: B006
    container_image: str | None = None,
    outputs: Annotated[list[str], Field(description="files it writes")] = [],  # noqa: B006
    task_budget: Annotated[float | None, Field(description="credits")] = None,
    adaptation: Adapt = None,
    stage_in: Annotated[list[str], Field(description="transfer ids to wait for")] = [],  # noqa: B006
    idempotency_key: IdemKey = None,
) -> SubmitAnswer:
    """Place one job within `envelope` on the best feasible site."""
    wake, unbound = await continuation_for(ctx, "submit_task")
    script = await _script_text(ctx, script)
    req = SubmitTaskRequest.model_validate(
        {
            "command": command,
            "envelope": envelope,
            "script": script,
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
            **submission_fields(ctx, idempotency_key, wake),
        }
    )
    handle = await daemon_link(ctx).call(lambda c: c.submit_task(req))
    noted = with_unbound_note(handle.brief(), unbound, handle.task_id)
    return SubmitAnswer(**{**dict(noted), "script": req.script_reading})


@guarded("Read resource fedhpc://groups/{group_id} for the whole group.")
async def submit_group(
    ctx: Ctx,
    *,
    objective: str,
    children: Annotated[list[GroupChild], Field(min_length=1)],
    envelope: GroupEnvelope,
    policy: GroupPolicy = PolicyKind.BEST_FEASIBLE,
    spread: Annotated[bool, Field(description="prefer distinct systems")] = True,
    workdir: str | None = None,
    env: dict[str, str] = {},  # noqa: B006
    adaptation: GroupAdapt = None,
    idempotency_key: IdemKey = None,
) -> GroupView:
    """A sweep of jobs under one objective; envelope and adaptation as in submit_task."""
    wake, unbound = await continuation_for(ctx, "submit_group")
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
            **submission_fields(ctx, idempotency_key, wake),
        }
    )
    view = await daemon_link(ctx).call(lambda c: c.submit_group(req))
    return with_unbound_note(view, unbound, view.group_id)


@guarded(
    "Call get_result again with max_bytes={fit} or less, or preview='none' (outputs names "
    "the files), or read resource fedhpc://tasks/{task_id}."
)
async def get_result(
    ctx: Ctx,
    *,
    task_id: TaskId,
    preview: Literal["stdout", "stderr", "none"] | None = None,
    max_bytes: Annotated[int, Field(ge=1, le=65536)] = PREVIEW_BYTES,
    fields: Annotated[list[str], Field(description="only these")] = [],  # noqa: B006
) -> ResultManifest:
    """Resume: a task's state, attempts, outputs, stdout tail (stderr on failure). Do not
    poll."""
    req = ResultRequest(task_id=task_id, preview=preview, max_bytes=max_bytes, brief=True)
    return project(await daemon_link(ctx).call(lambda c: c.get_result(req)), fields)


@guarded()
async def replan(
    ctx: Ctx,
    *,
    task_id: TaskId,
    exclude_sites: list[str] = [],  # noqa: B006
    envelope: OtherEnvelope = None,
) -> TaskHandle:
    """Re-place a task not yet started, or an unschedulable one; no work is lost."""
    req = ReplanRequest(task_id=task_id, exclude_sites=tuple(exclude_sites), envelope=envelope)
    return await daemon_link(ctx).call(lambda c: c.replan(req))


@guarded()
async def cancel(ctx: Ctx, *, task_id: TaskId) -> TaskHandle:
    """Cancel a task, or a group's live children by group_id; their work is lost."""
    req = CancelRequest(task_id=task_id)
    return await daemon_link(ctx).call(lambda c: c.cancel(req))


# A transfer's own outcomes; a transfer that a task waits for raises none (the task's does).
TRANSFER_EVENTS = ("transfer.succeeded", "transfer.failed", "transfer.blocked")


@guarded()
async def move_data(
    ctx: Ctx,
    *,
    source: Annotated[str, Field(description="site:root/path, e.g. delta:work/in.dat")],
    destination: Annotated[str, Field(description="site:root/path")],
    mode: TransferMode = TransferMode.REPLICATE,
    recursive: bool = False,
    sync_level: Annotated[SyncLevel | None, Field(description="skip existing files")] = None,
    verify_checksum: bool = True,
    idempotency_key: IdemKey = None,
) -> TransferHandle:
    """Copy files site to site, never through you."""
    spec, unbound = await continuation_for(ctx, "move_data")
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
    handle = await daemon_link(ctx).call(lambda c: c.move_data(req))
    where = f"fedhpc://transfers/{handle.transfer_id}"
    if handle.state.terminal:
        again = f"Already {handle.state.value}: read {where}. To copy again, pass a new "
        return handle.model_copy(update={"next": again + "idempotency_key."})
    if spec is None:
        return with_unbound_note(handle, unbound, handle.transfer_id)
    return handle


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
