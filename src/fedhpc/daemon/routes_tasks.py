"""REST handlers of the task operations: submit, list, result, cancel, replan, groups, and the
envelope drafter."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint, GroupQuery, GroupsQuery, TasksQuery
from fedhpc.daemon.guard import Handler, model_response
from fedhpc.daemon.limits import DRAFT_BUDGET_S, read_body, run_bounded
from fedhpc.daemon.owner import principal
from fedhpc.daemon.scripts import read_script_file
from fedhpc.daemon.sitenames import check_request_sites
from fedhpc.daemon.state import DaemonState
from fedhpc.domain.job import JobState
from fedhpc.errors import UsageError
from fedhpc.ops.draft import DraftRequest, draft_envelope
from fedhpc.ops.pending import pending_note
from fedhpc.ops.scripts import ScriptFileRequest
from fedhpc.ops.task_views import ResultManifest, SubmitAnswer, TaskSummary
from fedhpc.ops.tasks import (
    CancelRequest,
    ReplanRequest,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)
from fedhpc.orchestrator import Orchestrator

__all__ = ["handlers"]

R = TypeVar("R", SubmitTaskRequest, SubmitGroupRequest, ReplanRequest)


def _sites_checked(state: DaemonState, req: R) -> R:
    """`req` once every site it names is usable (typed error naming the config fix if not)."""
    if isinstance(req, SubmitTaskRequest):
        check_request_sites(
            state.collector,
            fixed_site=req.fixed_site,
            envelope=req.envelope,
            workdir=req.workdir,
            outputs=req.outputs,
        )
    elif isinstance(req, SubmitGroupRequest):
        check_request_sites(state.collector, envelope=req.envelope, workdir=req.workdir)
    else:
        check_request_sites(state.collector, envelope=req.envelope, exclude_sites=req.exclude_sites)
    return req


async def _with_pending(o: Orchestrator, req: ResultRequest, m: ResultManifest) -> ResultManifest:
    """At a scheduler, not started: why (its reason) and when fedhpc predicted it would start,
    in `waiting` (which said so only for fedhpc's own holds; every face reads it). The brief
    form has neither the attempt's times nor the decision: they are read in full for it."""
    if m.waiting or m.state not in (JobState.SUBMITTED, JobState.PENDING):
        return m
    full = m
    if req.brief:
        full = await o.tools.get_result(req.model_copy(update={"brief": False, "preview": "none"}))
    note = pending_note(full, datetime.now(UTC))
    return m.model_copy(update={"waiting": note}) if note is not None else m


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    o = state.orchestrator

    async def submit_task(request: Request) -> Response:
        req = _sites_checked(state, SubmitTaskRequest.model_validate_json(await read_body(request)))
        who = principal(request)
        await who.check_staged(state.store, req.stage_in)
        accepted = await o.intake.submit_task(who.own(req), owner=who.owner)
        handle = await o.answers.hinted(accepted, "submit_task")
        # What a job script's header gave, in the answer of every face (MCP, REST, CLI).
        return model_response(SubmitAnswer(**{**dict(handle), "script": req.script_reading}))

    async def tasks(request: Request) -> Response:
        q = TasksQuery.model_validate(dict(request.query_params))
        owner = principal(request).scope
        if q.offset is None and q.find is None:  # the newest N, as `fedhpc tasks` lists them
            rows = await o.tools.list_tasks(state=q.state, limit=q.limit, owner=owner)
            return JSONResponse({"tasks": [t.model_dump(mode="json") for t in rows]})
        # A page (the dashboard's), filtered in SQL, with the listing's total.
        offset = q.offset or 0
        page, total = await state.store.task_page(
            state=q.state.value if q.state is not None else None,
            owner=owner,
            find=q.find,
            offset=offset,
            limit=q.limit,
        )
        return JSONResponse(
            {
                "tasks": [TaskSummary.from_row(row).model_dump(mode="json") for row in page],
                "offset": offset,
                "total": total,
            }
        )

    async def result(request: Request) -> Response:
        req = ResultRequest.model_validate(
            {"task_id": request.path_params["task_id"], **dict(request.query_params)}
        )
        await principal(request).check(state.store, req.task_id)
        manifest = await o.answers.hinted_result(await o.tools.get_result(req))
        return model_response(await _with_pending(o, req, manifest))

    async def cancel_task(request: Request) -> Response:
        await principal(request).check(state.store, request.path_params["task_id"])
        handle = await o.tools.cancel(CancelRequest(task_id=request.path_params["task_id"]))
        return model_response(await o.answers.hinted(handle, "cancel"))

    async def replan_task(request: Request) -> Response:
        req = _sites_checked(state, ReplanRequest.model_validate_json(await read_body(request)))
        if req.task_id != request.path_params["task_id"]:
            raise UsageError("task_id in the body and the path differ")
        await principal(request).check(state.store, req.task_id)
        return model_response(await o.answers.hinted(await o.tools.replan(req), "replan"))

    async def submit_group_(request: Request) -> Response:
        body = await read_body(request)
        req = _sites_checked(state, SubmitGroupRequest.model_validate_json(body))
        who = principal(request)
        view = await o.groups.submit(who.own(req), owner=who.owner)
        return model_response(await o.answers.hinted_group(view, "submit_group"))

    async def group(request: Request) -> Response:
        page = GroupQuery.model_validate(dict(request.query_params)).model_dump()
        await principal(request).check(state.store, request.path_params["group_id"], "group")
        view = await o.groups.view(request.path_params["group_id"], **page)
        return model_response(await o.answers.hinted_group(view, "group"))

    async def groups(request: Request) -> Response:
        # The newest groups with their counts over every child (in SQL), none of their
        # children listed: the dashboard's group list, whatever a group's size.
        # A page of them (`offset`), with how many groups there are in all (`total`).
        q = GroupsQuery.model_validate(dict(request.query_params))
        scope = principal(request).scope
        ids, total = await state.store.group_page(owner=scope, offset=q.offset, limit=q.limit)
        views = [await o.groups.view(gid, limit=0) for gid in ids]
        return JSONResponse(
            {
                "groups": [v.model_dump(mode="json") for v in views],
                "offset": q.offset,
                "total": total,
            }
        )

    async def draft(request: Request) -> Response:
        req = DraftRequest.model_validate_json(await read_body(request))
        work = partial(
            draft_envelope,
            req.description,
            req.code_context,
            req.proposed,
            source=req.source,
            rationale=req.rationale,
            confidence=req.confidence,
            profiles=[s.profile for s in state.collector.sites.values()],
            sites=frozenset(state.collector.sites),
        )
        answer = await run_bounded(work, budget_s=DRAFT_BUDGET_S, what="draft_envelope")
        return model_response(answer)

    async def read_script(request: Request) -> Response:
        req = ScriptFileRequest.model_validate_json(await read_body(request))
        who = principal(request).owner  # a per-person site reads it as the caller
        return model_response(await read_script_file(state, req.path, who))

    return {
        api.READ_SCRIPT: read_script,
        api.SUBMIT_TASK: submit_task,
        api.TASKS: tasks,
        api.GET_RESULT: result,
        api.CANCEL: cancel_task,
        api.REPLAN: replan_task,
        api.SUBMIT_GROUP: submit_group_,
        api.GROUP: group,
        api.GROUPS: groups,
        api.DRAFT_ENVELOPE: draft,
    }
