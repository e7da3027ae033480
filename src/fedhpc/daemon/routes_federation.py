"""REST handlers of the daemon's health and the federation: sites, partitions, estimators, and
the wait placement predicts now for the reference requests (the outlook)."""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc import __version__
from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint
from fedhpc.daemon.guard import Handler, model_response
from fedhpc.daemon.state import DaemonState
from fedhpc.logs import recent_errors
from fedhpc.ops.inspect import FederationView, InspectRequest, with_planner_view
from fedhpc.orchestrator.outlook import WaitOutlook
from fedhpc.store.engine import StoreUnavailable
from fedhpc.store.lease import holder_of

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


STORE_LOOK_S = 2.0  # how long health waits on the store before it says the store is out


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    o = state.orchestrator
    waits_now = WaitOutlook(state.collector, o.waits, o.claims, o.clock)

    async def health(request: Request) -> Response:
        store: dict[str, Any] = {"engine": state.store.dialect}
        schema = last_seq = None
        try:  # the daemon answers for itself also while its store does not (a database restart)
            with anyio.fail_after(STORE_LOOK_S):
                schema, last_seq = await state.store.schema_and_last_seq()  # as its store says
                store["leader"] = await holder_of(state.store)
        except (StoreUnavailable, TimeoutError) as exc:
            why = exc.message if isinstance(exc, StoreUnavailable) else "no answer in time"
            store["error"] = f"the store does not answer: {why}"
        # PostgreSQL: this daemon leads the store with this lease token, and who leads it now
        # (host:pid, and whether its lease is live; docs/store.md)
        store["lease_token"] = state.store.lease_token
        return JSONResponse(
            {
                "version": __version__,
                "started_at": state.started_at.isoformat(),
                "sites": sorted(state.collector.sites),
                "schema": schema,
                "cycle_s": o.cycle_s,
                "cycles": o.cycles,
                "remote_calls": o.remote_calls(),
                "last_event_seq": last_seq,
                "store": store,
                "requests": state.request_times.summary(),
                "errors": recent_errors(),  # the newest errors each loop logged, with counts
            }
        )

    async def calibrated(view: FederationView) -> Response:
        """The view with how each estimator's forecasts held per site (placement.calibration)
        and the sites suspect now."""
        rows = (await o.waits.errors()).as_rows()
        return model_response(with_planner_view(view, rows, o.planner.suspects.now()))

    async def federation(request: Request) -> Response:
        return await calibrated(state.view(_inspect_request(request)))

    async def refresh(request: Request) -> Response:
        await state.collector.refresh(force=True)
        return await calibrated(state.view(_inspect_request(request)))

    async def estimators(request: Request) -> Response:
        errors = await o.waits.errors()
        return JSONResponse(
            {
                "estimators": errors.as_rows(),
                "min_samples": errors.min_samples,
                "judged": errors.judged(),  # the jobs behind the errors, for a picture
                "scheduler_calls": o.waits.cache.calls,
            }
        )

    async def outlook(request: Request) -> Response:
        return JSONResponse(await waits_now.answer())

    return {
        api.HEALTH: health,
        api.FEDERATION: federation,
        api.REFRESH: refresh,
        api.ESTIMATORS: estimators,
        api.OUTLOOK: outlook,
    }
