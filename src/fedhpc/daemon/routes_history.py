"""GET /v1/federation/history: the recent probes of each site, reduced to what a picture needs
(pending jobs, free and total GPUs per partition; with `credit`, each account's credit instead).
Read-only, bounded, paginated by `before`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint, HistoryQuery
from fedhpc.daemon.guard import Handler
from fedhpc.daemon.state import DaemonState

__all__ = ["handlers"]


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    async def history(request: Request) -> Response:
        q = HistoryQuery.model_validate(
            {**dict(request.query_params), "site": request.query_params.getlist("site")}
        )
        names = sorted(
            set(q.site) & set(state.collector.sites) if q.site else state.collector.sites
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for name in names:
            if q.credit:  # credit over time: each probe's accounts (used, budget, balance)
                states = await state.store.site_history(name, limit=q.limit, before=q.before)
                out[name] = [
                    {
                        "at": s.collected_at.isoformat(),
                        "health": s.health.value,
                        "credit": [
                            {**c.model_dump(mode="json"), "remaining": c.remaining}
                            for c in s.credit
                        ],
                    }
                    for s in states
                ]
                continue
            out[name] = await state.store.site_points(name, limit=q.limit, before=q.before)
        return JSONResponse({"sites": out, "limit": q.limit})

    return {api.HISTORY: history}
