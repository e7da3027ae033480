"""GET /v1/ledger: what each person's work charged, per site account (`placement.spend`).
Scoped like tasks: a signed-in person gets their own rows, an admin or the operator every
person's (the owner on each row). The site accounts' balances stay in the federation view:
they are the operator's, shared by all."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint
from fedhpc.daemon.guard import Handler
from fedhpc.daemon.owner import principal
from fedhpc.daemon.state import DaemonState
from fedhpc.placement.spend import ledger_rows

__all__ = ["MAX_ATTEMPTS", "handlers"]

MAX_ATTEMPTS = 20_000  # the newest attempts read per answer; the answer says when there were more


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    async def ledger(request: Request) -> Response:
        scope = principal(request).scope
        attempts = await state.store.owned_attempts(scope, MAX_ATTEMPTS + 1)
        sites = state.collector.sites
        unreadable: list[str] = []
        accounts = ledger_rows(
            attempts[:MAX_ATTEMPTS], sites, states=state.collector.latest, unreadable=unreadable
        )
        return JSONResponse(
            {
                "accounts": accounts,
                "read": min(len(attempts), MAX_ATTEMPTS),
                "more": len(attempts) > MAX_ATTEMPTS,
                "unreadable": sorted(set(unreadable)),  # their tasks: not counted above
            }
        )

    return {api.LEDGER: ledger}
