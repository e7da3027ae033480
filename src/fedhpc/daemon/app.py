"""The daemon's typed REST API (starlette): the operation models, served on a Unix socket."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fedhpc import __version__
from fedhpc.collector import Collector
from fedhpc.errors import FedError, FieldIssue, ValidationFailed
from fedhpc.ops.inspect import FederationView, InspectRequest, inspect_federation
from fedhpc.store import Store

__all__ = ["DaemonState", "build_app"]


class EventsQuery(BaseModel):
    """Query of GET /v1/events."""

    model_config = ConfigDict(extra="forbid")

    after: int = Field(default=0, ge=0, description="the last event seq already seen")
    limit: int = Field(default=100, ge=1, le=1000)


class DaemonState:
    """What request handlers may use: the store (read), the collector, the start time."""

    def __init__(self, store: Store, collector: Collector, started_at: datetime) -> None:
        self.store = store
        self.collector = collector
        self.started_at = started_at

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


def _error(exc: FedError, status: int) -> JSONResponse:
    return JSONResponse(exc.as_dict(), status_code=status)


Handler = Callable[[Request], Awaitable[Response]]


def _guard(fn: Handler) -> Handler:
    """Every failure leaves as {code, message, hint}; validation errors name the field."""

    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except ValidationError as exc:
            issues = [
                FieldIssue(".".join(str(p) for p in e["loc"]) or "(body)", e["msg"])
                for e in exc.errors()
            ]
            return _error(ValidationFailed(issues), 422)
        except FedError as exc:
            return _error(exc, 400 if exc.code in {"usage", "validation"} else 500)

    return wrapped


def build_app(state: DaemonState) -> Starlette:
    async def health(request: Request) -> Response:
        return JSONResponse(
            {
                "version": __version__,
                "started_at": state.started_at.isoformat(),
                "sites": sorted(state.collector.sites),
                "schema": await state.store.schema_version(),
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
        rows = await state.store.events_after(q.after, limit=q.limit)
        return JSONResponse({"events": [e.model_dump(mode="json") for e in rows]})

    routes = [
        Route("/v1/health", _guard(health), methods=["GET"]),
        Route("/v1/federation", _guard(federation), methods=["GET"]),
        Route("/v1/refresh", _guard(refresh), methods=["POST"]),
        Route("/v1/events", _guard(events), methods=["GET"]),
    ]
    return Starlette(routes=routes)
