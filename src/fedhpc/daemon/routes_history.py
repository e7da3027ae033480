"""GET /v1/federation/history: the recent probes of each site, reduced to what a picture needs
(pending jobs, free and total GPUs per partition). Read-only, bounded, paginated by `before`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fedhpc.domain.site import PartitionState, SiteState

if TYPE_CHECKING:
    from collections.abc import Callable

    from fedhpc.daemon.app import DaemonState, Handler

__all__ = ["HistoryQuery", "history_point", "history_routes"]

MAX_POINTS = 240  # per site and call: each probe is parsed (a few KB) then reduced to ~200 B


class HistoryQuery(BaseModel):
    """Query of GET /v1/federation/history."""

    model_config = ConfigDict(extra="forbid")

    site: list[str] = Field(default=[], max_length=64, description="only these sites")
    limit: int = Field(default=120, ge=1, le=MAX_POINTS, description="newest probes per site")
    before: datetime | None = Field(default=None, description="only probes older than this")


def _partition(p: PartitionState) -> dict[str, Any]:
    return {"name": p.name, "pending_jobs": p.pending_jobs, "running_jobs": p.running_jobs,
            "free_gpus": p.free_gpus, "total_gpus": p.total_gpus}  # fmt: skip


def history_point(st: SiteState) -> dict[str, Any]:
    """One probe as a point series: when, health, and per partition pending/free/total."""
    return {
        "at": st.collected_at.isoformat(),
        "health": st.health.value,
        "partitions": [
            {
                "name": p.name,
                "pending_jobs": p.pending_jobs,
                "running_jobs": p.running_jobs,
                "free_gpus": p.free_gpus,
                "total_gpus": p.total_gpus,
            }
            for p in st.partitions
        ],
    }


def history_routes(state: DaemonState, *, guard: Callable[[Handler], Handler]) -> list[Route]:
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

    return [Route("/v1/federation/history", guard(history), methods=["GET"])]
