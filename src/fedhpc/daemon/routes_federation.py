"""REST handlers of the daemon's health and the federation: sites, partitions, estimators."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc import __version__
from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint
from fedhpc.daemon.guard import Handler, model_response
from fedhpc.daemon.state import DaemonState
from fedhpc.ops.inspect import InspectRequest
from fedhpc.store.schema import SCHEMA_VERSION

__all__ = ["handlers"]


def _inspect_request(request: Request) -> InspectRequest:
    q = request.query_params
    data: dict[str, Any] = {"sites": q.getlist("site")}
    for key in ("accelerator", "arch"):
        if key in q:
            data[key] = q[key]
    if q.get("include_blocked") in {"1", "true"}:
        data["include_blocked"] = True
    return InspectRequest.model_validate(data)


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    o = state.orchestrator

    async def health(request: Request) -> Response:
        return JSONResponse(
            {
                "version": __version__,
                "started_at": state.started_at.isoformat(),
                "sites": sorted(state.collector.sites),
                "schema": SCHEMA_VERSION,  # the daemon's store migrated to it at start
                "cycle_s": o.cycle_s,
                "cycles": o.cycles,
                "remote_calls": o.remote_calls(),
                "last_event_seq": await state.store.last_seq(),
            }
        )

    async def federation(request: Request) -> Response:
        return model_response(state.view(_inspect_request(request)))

    async def refresh(request: Request) -> Response:
        await state.collector.refresh(force=True)
        return model_response(state.view(_inspect_request(request)))

    async def estimators(request: Request) -> Response:
        rows = (await o.waits.errors()).rows()
        return JSONResponse(
            {
                "estimators": [
                    {
                        "site": e.site,
                        "partition": e.partition,
                        "method": e.method,
                        "n": e.n,
                        "median_abs_error_s": round(e.median_abs_s, 1),
                        "median_bias_s": round(e.median_bias_s, 1),
                    }
                    for e in rows
                ],
                "scheduler_calls": o.waits.cache.calls,
            }
        )

    return {
        api.HEALTH: health,
        api.FEDERATION: federation,
        api.REFRESH: refresh,
        api.ESTIMATORS: estimators,
    }
