"""GET /v1/federation/history: the recent probes of each site, reduced to what a picture needs
(pending jobs, free and total GPUs per partition; with `credit`, each account's credit instead).
Read-only, bounded, paginated by `before`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint, HistoryQuery
from fedhpc.daemon.guard import Handler
from fedhpc.daemon.state import DaemonState
from fedhpc.domain.site import SiteState
from fedhpc.placement.burn import burn_down

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
        burns: dict[str, dict[str, dict[str, Any]]] = {}
        for name in names:
            if q.credit:  # credit over time: each probe's accounts (used, budget, balance)
                states = await state.store.site_history(name, limit=q.limit, before=q.before)
                if b := _burns(state, name, states):
                    burns[name] = b
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
        body: dict[str, Any] = {"sites": out, "limit": q.limit}
        if q.credit:
            body["burn"] = burns
        return JSONResponse(body)

    return {api.HISTORY: history}


def _burns(state: DaemonState, name: str, states: list[SiteState]) -> dict[str, dict[str, Any]]:
    """Per account of `name` with an expiry in the config: its burn-down over `states`."""
    site = state.collector.sites.get(name)
    out: dict[str, dict[str, Any]] = {}
    for acct in site.user.accounts if site is not None else ():
        if acct.expires is None:
            continue
        points = [
            (s.collected_at, c.remaining)
            for s in states
            for c in s.credit
            if c.account == acct.name
        ]
        unit = next((c.unit for s in states for c in s.credit if c.account == acct.name), "SU")
        burn = burn_down(
            points, expires=acct.expires, reserve=acct.reserve, now=datetime.now(UTC), unit=unit
        )
        out[acct.name] = burn.as_dict()
    return out
