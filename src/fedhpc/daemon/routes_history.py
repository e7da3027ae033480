"""GET /v1/federation/history: the recent probes of each site, reduced to what a picture needs
(pending jobs, free and total GPUs per partition). Read-only, bounded, paginated by `before`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint, HistoryQuery
from fedhpc.daemon.guard import Handler
from fedhpc.daemon.state import DaemonState
from fedhpc.domain.site import PartitionState, SiteState

__all__ = ["handlers", "history_point"]


def _partition(p: PartitionState) -> dict[str, Any]:
    return {
        "name": p.name,
        "pending_jobs": p.pending_jobs,
        "running_jobs": p.running_jobs,
        "free_gpus": p.free_gpus,
        "total_gpus": p.total_gpus,
    }


def history_point(st: SiteState) -> dict[str, Any]:
    """One probe as a point series: when, health, and per partition pending/free/total."""
    return {
        "at": st.collected_at.isoformat(),
        "health": st.health.value,
        "partitions": [_partition(p) for p in st.partitions],
    }


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
            rows = await state.store.site_history(name, limit=q.limit, before=q.before)
            out[name] = [history_point(st) for st in rows]
        return JSONResponse({"sites": out, "limit": q.limit})

    return {api.HISTORY: history}
