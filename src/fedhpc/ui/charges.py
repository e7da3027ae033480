"""What the live work will charge, per site and account: each running or queued attempt's
worst-case charge (its whole granted wall time), for the dashboard's allocation table. Read
from the daemon's ledger (`GET /v1/ledger`, `placement.spend`), so the charge is the one the
daemon places and bounds budgets with: the partition's live billing weights where they replace
the profile's (`domain.billing.live_charge`; this process has no probe of its own). Every
attempt in play counts, so a hedged task's copies waiting at two sites commit a charge at each;
a copy set aside commits nothing. Bounded by the ledger: its newest attempts are read, and the
answer says when there were more."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request

from fedhpc.client.daemon_client import DaemonClient

__all__ = ["charge_rows", "charges_route", "live_charges"]


def charge_rows(ledger: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (site, account), over the people the ledger's rows name: the running attempts' and
    the queued ones' worst-case charges, and how many attempts are live."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in ledger:
        if not r.get("live"):
            continue
        empty = {"site": r["site"], "account": r["account"], "unit": r["unit"], "jobs": 0}
        row = rows.setdefault((r["site"], r["account"]), {**empty, "running": 0.0, "queued": 0.0})
        row["running"] = round(row["running"] + r["running"], 4)
        row["queued"] = round(row["queued"] + r["queued"], 4)
        row["jobs"] += r["live"]
    return [rows[k] for k in sorted(rows)]


async def live_charges(client: DaemonClient) -> dict[str, Any]:
    """The charge rows, how many attempts the ledger read, and whether more exist."""
    body = await client.ledger()
    return {"charges": charge_rows(body["accounts"]), "read": body["read"], "more": body["more"]}


def charges_route() -> Callable[[Request, DaemonClient], Awaitable[dict[str, Any]]]:
    """GET /api/charges: `live_charges`."""

    async def charges(request: Request, c: DaemonClient) -> dict[str, Any]:
        return await live_charges(c)

    return charges
