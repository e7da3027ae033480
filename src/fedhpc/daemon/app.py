"""The daemon's typed REST API (starlette): the operation models, served on a Unix socket."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fedhpc import __version__
from fedhpc.bridge import Bridge
from fedhpc.collector import Collector
from fedhpc.daemon.limits import DRAFT_BUDGET_S, read_body, run_bounded
from fedhpc.daemon.routes_bridge import bridge_routes
from fedhpc.daemon.routes_data import data_routes
from fedhpc.daemon.routes_history import history_routes
from fedhpc.daemon.sitenames import check_request_sites
from fedhpc.domain.job import JobState
from fedhpc.errors import (
    HTTP_STATUS,
    FedError,
    FieldIssue,
    UsageError,
    ValidationFailed,
    typed_error,
)
from fedhpc.ops.draft import DraftRequest
from fedhpc.ops.events import AckRequest, ArchiveRequest, EventsQuery, check_consumer
from fedhpc.ops.inspect import FederationView, InspectRequest, inspect_federation
from fedhpc.ops.suggest import request_model, unknown_field_reason
from fedhpc.ops.tasks import (
    GROUP_PAGE,
    GROUP_PAGE_MAX,
    CancelRequest,
    ReplanRequest,
    ResultRequest,
    SubmitGroupRequest,
    SubmitTaskRequest,
)
from fedhpc.orchestrator import (
    Orchestrator,
    cancel,
    estimates,
    get_result,
    group_view,
    hinted,
    hinted_group,
    hinted_result,
    list_tasks,
    replan,
    submit_group,
)
from fedhpc.placement import draft_envelope
from fedhpc.store import Store
from fedhpc.store.archive import archive_events
from fedhpc.transfer.service import TransferService

__all__ = ["DaemonState", "build_app", "status_of"]

log = structlog.get_logger(__name__)


class TasksQuery(BaseModel):
    """Query of GET /v1/tasks."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    state: JobState | None = None
    limit: int = Field(default=100, ge=1, le=1000)


class DaemonState:
    """What request handlers may use: the store (read), the collector, the start time."""

    def __init__(
        self,
        store: Store,
        collector: Collector,
        started_at: datetime,
        orchestrator: Orchestrator,
    ) -> None:
        self.store = store
        self.collector = collector
        self.started_at = started_at
        self.orchestrator = orchestrator
        self.transfers: TransferService | None = None
        self.bridge: Bridge | None = None
        self.archive_path: Path | None = None  # where archived events go (the daemon's home)

    def view(self, request: InspectRequest | None = None) -> FederationView:
        return inspect_federation(
            self.collector.latest,
            self.collector.sites,
            now=datetime.now(UTC),
            refresh_s=self.collector.refresh_s,
            request=request,
        )


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def status_of(exc: FedError) -> int:
    """The HTTP status of a typed error: its class decides, never its code string."""
    return HTTP_STATUS[exc.kind]


def _error(exc: FedError) -> JSONResponse:
    return JSONResponse(exc.as_dict(), status_code=status_of(exc))


class _Internal(FedError):
    code = "internal"
    default_hint = "This is a fedhpc bug: retry once, then report it with the daemon's log."


Handler = Callable[[Request], Awaitable[Response]]


def _guard(fn: Handler) -> Handler:
    """Every failure leaves as {code, message, hint} with the status of its class; validation
    errors name the field; anything untyped is logged and answered as `internal` (500)."""

    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except ValidationError as exc:
            root = request_model(exc.title)
            issues = [
                FieldIssue(
                    ".".join(str(p) for p in e["loc"]) or "(body)",
                    unknown_field_reason(root, tuple(e["loc"]))
                    if e["type"] == "extra_forbidden"
                    else e["msg"][:500],
                )
                for e in exc.errors(include_url=False, include_input=False)
            ]
            return _error(ValidationFailed(issues))
        except FedError as exc:
            return _error(exc)
        except Exception as exc:  # a bug: the caller gets a typed answer, the log the details
            if typed := typed_error(exc):  # raised inside a task group
                return _error(typed)
            log.exception("request failed", path=request.url.path, error=repr(exc)[:500])
            return _error(_Internal(f"the daemon failed on {request.url.path}"))

    return wrapped


R = TypeVar("R", SubmitTaskRequest, SubmitGroupRequest, ReplanRequest)


def _sites_checked(state: DaemonState, req: R) -> R:
    """`req` once every site it names is usable (typed error naming the config fix if not)."""
    if isinstance(req, SubmitTaskRequest):
        check_request_sites(
            state.collector, fixed_site=req.fixed_site, envelope=req.envelope, workdir=req.workdir
        )
    elif isinstance(req, SubmitGroupRequest):
        check_request_sites(state.collector, envelope=req.envelope, workdir=req.workdir)
    else:
        check_request_sites(state.collector, envelope=req.envelope, exclude_sites=req.exclude_sites)
    return req


async def _archive(
    state: DaemonState, read: Callable[[Request], Awaitable[bytes]], request: Request
) -> Response:
    """POST /v1/events/archive: move old delivered events to the archive (store/archive.py)."""
    req = ArchiveRequest.model_validate_json(await read(request))
    if state.archive_path is None:
        raise UsageError("this daemon has no archive folder")
    now = datetime.now(UTC)
    report = await archive_events(state.store, state.archive_path, now=now,
                                  before=now - timedelta(days=req.older_than_days),
                                  dry_run=req.dry_run)  # fmt: skip
    return JSONResponse(report.as_dict())


class GroupQuery(BaseModel):
    """GET /v1/groups/{id}: a page of children (counts always cover the whole group)."""

    model_config = ConfigDict(extra="forbid")

    after: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    limit: int = Field(default=GROUP_PAGE, ge=1, le=GROUP_PAGE_MAX)


async def _group(o: Orchestrator, request: Request) -> Response:
    page = GroupQuery.model_validate(dict(request.query_params)).model_dump()
    view = await group_view(o, request.path_params["group_id"], **page)
    return _json(await hinted_group(o, view, "group"))


def build_app(state: DaemonState) -> Starlette:
    async def health(request: Request) -> Response:
        return JSONResponse(
            {
                "version": __version__,
                "started_at": state.started_at.isoformat(),
                "sites": sorted(state.collector.sites),
                "schema": await state.store.schema_version(),
                "cycle_s": state.orchestrator.cycle_s,
                "cycles": state.orchestrator.cycles,
                "remote_calls": state.orchestrator.remote_calls(),
                "last_event_seq": await state.store.last_seq(),
            }
        )

    def _inspect_request(request: Request) -> InspectRequest:
        q = request.query_params
        data: dict[str, Any] = {"sites": q.getlist("site")}
        for key in ("accelerator", "arch"):
            if key in q:
                data[key] = q[key]
        if q.get("include_blocked") in {"1", "true"}:
            data["include_blocked"] = True
        return InspectRequest.model_validate(data)

    async def federation(request: Request) -> Response:
        return _json(state.view(_inspect_request(request)))

    async def refresh(request: Request) -> Response:
        await state.collector.refresh(force=True)
        return _json(state.view(_inspect_request(request)))

    async def events(request: Request) -> Response:
        q = EventsQuery.model_validate(dict(request.query_params))
        after = q.after
        if q.consumer is not None:  # what the consumer acknowledged is not listed again
            after = max(after, await state.store.cursor(q.consumer))
        rows = await state.store.events_after(after, limit=q.limit)
        return JSONResponse({"events": [e.model_dump(mode="json") for e in rows]})

    o = state.orchestrator

    body = read_body

    async def submit_task(request: Request) -> Response:
        req = _sites_checked(state, SubmitTaskRequest.model_validate_json(await body(request)))
        return _json(await hinted(o, await o.submit_task(req), "submit_task"))

    async def tasks(request: Request) -> Response:
        q = TasksQuery.model_validate(dict(request.query_params))
        rows = await list_tasks(o, state=q.state, limit=q.limit)
        return JSONResponse({"tasks": [t.model_dump(mode="json") for t in rows]})

    async def result(request: Request) -> Response:
        req = ResultRequest.model_validate(
            {"task_id": request.path_params["task_id"], **dict(request.query_params)}
        )
        return _json(await hinted_result(o, await get_result(o, req)))

    async def cancel_task(request: Request) -> Response:
        handle = await cancel(o, CancelRequest(task_id=request.path_params["task_id"]))
        return _json(await hinted(o, handle, "cancel"))

    async def replan_task(request: Request) -> Response:
        req = _sites_checked(state, ReplanRequest.model_validate_json(await body(request)))
        if req.task_id != request.path_params["task_id"]:
            raise UsageError("task_id in the body and the path differ")
        check_request_sites(state.collector, envelope=req.envelope, exclude_sites=req.exclude_sites)
        return _json(await hinted(o, await replan(o, req), "replan"))

    async def submit_group_(request: Request) -> Response:
        req = _sites_checked(state, SubmitGroupRequest.model_validate_json(await body(request)))
        return _json(await hinted_group(o, await submit_group(o, req), "submit_group"))

    async def draft(request: Request) -> Response:
        req = DraftRequest.model_validate_json(await body(request))
        work = partial(
            draft_envelope, req.description, req.code_context, req.proposed, source=req.source,
            rationale=req.rationale, confidence=req.confidence,
            profiles=[s.profile for s in state.collector.sites.values()],
            sites=frozenset(state.collector.sites),
        )  # fmt: skip
        answer = await run_bounded(work, budget_s=DRAFT_BUDGET_S, what="draft_envelope")
        return _json(answer)

    async def ack(request: Request) -> Response:
        req = AckRequest.model_validate_json(await body(request))
        check_consumer(req.consumer)
        # Never past the newest event: an acknowledgement of a future seq would hide events
        # that have not happened yet.
        through = min(req.through, await state.store.last_seq())
        async with state.store.transaction() as tx:
            await tx.set_cursor(req.consumer, through, at=datetime.now(UTC))
        return JSONResponse({"cursor": await state.store.cursor(req.consumer)})

    async def estimators(request: Request) -> Response:
        rows = (await estimates.errors(o)).rows()
        return JSONResponse({
            "estimators": [
                {"site": e.site, "partition": e.partition, "method": e.method, "n": e.n,
                 "median_abs_error_s": round(e.median_abs_s, 1),
                 "median_bias_s": round(e.median_bias_s, 1)}
                for e in rows
            ],
            "scheduler_calls": o.estimates.calls,
        })  # fmt: skip

    routes = [
        *bridge_routes(state, guard=_guard, read_body=body),
        Route("/v1/estimators", _guard(estimators), methods=["GET"]),
        Route("/v1/events/archive", _guard(partial(_archive, state, body)), methods=["POST"]),
        Route("/v1/tasks", _guard(submit_task), methods=["POST"]),
        Route("/v1/tasks", _guard(tasks), methods=["GET"]),
        Route("/v1/tasks/{task_id}", _guard(result), methods=["GET"]),
        Route("/v1/tasks/{task_id}/cancel", _guard(cancel_task), methods=["POST"]),
        Route("/v1/tasks/{task_id}/replan", _guard(replan_task), methods=["POST"]),
        Route("/v1/groups", _guard(submit_group_), methods=["POST"]),
        Route("/v1/groups/{group_id}", _guard(partial(_group, o)), methods=["GET"]),
        Route("/v1/envelopes/draft", _guard(draft), methods=["POST"]),
        Route("/v1/events/ack", _guard(ack), methods=["POST"]),
        Route("/v1/health", _guard(health), methods=["GET"]),
        Route("/v1/federation", _guard(federation), methods=["GET"]),
        Route("/v1/refresh", _guard(refresh), methods=["POST"]),
        Route("/v1/events", _guard(events), methods=["GET"]),
        *data_routes(state),
        *history_routes(state, guard=_guard),
    ]
    return Starlette(routes=routes)
