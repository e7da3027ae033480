"""GET /v1/ledger: what each person's work charged, per site account (issue 34: the credit
ledger is a person's too). Used: every ended attempt's charge over the time it ran; committed:
every live attempt's worst case (its whole granted wall time), both at the site profile's
charge model (`placement.credit.predict_charge`). Scoped like tasks: a signed-in person gets
their own rows, an admin or the operator every person's (the owner on each row). The site
accounts' balances stay in the federation view: they are the operator's, shared by all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fedhpc.daemon import api
from fedhpc.daemon.api import Endpoint
from fedhpc.daemon.guard import Handler
from fedhpc.daemon.owner import principal
from fedhpc.daemon.state import DaemonState
from fedhpc.domain.config import Site
from fedhpc.domain.job import JobState, Shape
from fedhpc.placement.credit import Charge, predict_charge

__all__ = ["MAX_ATTEMPTS", "handlers", "ledger_rows"]

MAX_ATTEMPTS = 20_000  # the newest attempts read per answer; the answer says when there were more
log = structlog.get_logger(__name__)
_LIVE = {JobState.SUBMITTED.value, JobState.PENDING.value, JobState.RUNNING.value}


def _charged(a: dict[str, Any], sites: Mapping[str, Site]) -> tuple[str, bool, Charge] | None:
    """An attempt's account, whether it is live, and its charge; None when nothing is charged
    (its site or partition no longer configured, no account, never ran)."""
    body, site = a["body"], sites.get(a["site"])
    account = body.get("account")
    spec = (
        next((p for p in site.profile.partitions if p.name == a["partition"]), None)
        if site is not None
        else None
    )
    if site is None or spec is None or not account or "shape" not in body:
        return None
    shape = Shape.model_validate(body["shape"])
    live = a["state"] in _LIVE and not body.get("superseded")
    ran = body.get("runtime_s")
    if not live and not ran:
        return None  # never ran, or nothing known of how long: nothing charged
    if not live:
        shape = shape.model_copy(update={"wall_time_s": float(ran)})
    return str(account), live, predict_charge(site.profile, spec, shape)


def ledger_rows(
    attempts: list[dict[str, Any]],
    sites: Mapping[str, Site],
    *,
    unreadable: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Per (owner, site, account): `used` by ended attempts, `committed` by live ones. An
    attempt on a site or partition no longer configured, or with no account, is left out; one
    that cannot be read is logged with its traceback and its task id put in `unreadable`, and
    the others are still counted."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for a in attempts:
        try:
            got = _charged(a, sites)
        except Exception:  # one bad row never costs the whole answer
            log.exception("unreadable attempt left out of the ledger", task=a.get("task_id"))
            if unreadable is not None:
                unreadable.append(str(a.get("task_id")))
            continue
        if got is None:
            continue
        account, live, charge = got
        owner = a["owner"] or ""
        key = (owner, a["site"], account)
        empty = {"site": a["site"], "account": account, "unit": charge.unit, "attempts": 0}
        row = rows.setdefault(key, {"owner": a["owner"], **empty, "used": 0.0, "committed": 0.0})
        row["committed" if live else "used"] += charge.amount
        row["attempts"] += 1
    for row in rows.values():
        row["used"], row["committed"] = round(row["used"], 4), round(row["committed"], 4)
    return [rows[k] for k in sorted(rows)]


def handlers(state: DaemonState) -> dict[Endpoint, Handler]:
    async def ledger(request: Request) -> Response:
        scope = principal(request).scope
        attempts = await state.store.owned_attempts(scope, MAX_ATTEMPTS + 1)
        sites = state.collector.sites
        unreadable: list[str] = []
        accounts = ledger_rows(attempts[:MAX_ATTEMPTS], sites, unreadable=unreadable)
        return JSONResponse(
            {
                "accounts": accounts,
                "read": min(len(attempts), MAX_ATTEMPTS),
                "more": len(attempts) > MAX_ATTEMPTS,
                "unreadable": sorted(set(unreadable)),  # their tasks: not counted above
            }
        )

    return {api.LEDGER: ledger}
