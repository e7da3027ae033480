"""What the live work will charge, per site and account: each running or queued attempt's
worst-case charge (its whole granted wall time, `placement.credit.predict_charge`), for the
dashboard's allocation table. Every attempt in play counts, so a hedged task's copies waiting
at two sites commit a charge at each, as the daemon's ledger counts them (`placement.spend`:
each live attempt not set aside); a copy set aside commits nothing. The charge is the
profile's: this page has no probe, so a charge that follows the scheduler's billing weights
(`domain.billing.live_charge`) is shown at the profile's figure, the ledger's at the live
one. Bounded: the newest MAX_LIVE live tasks are read, and the answer says when there were
more."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request

from fedhpc.client.daemon_client import DaemonClient
from fedhpc.domain.config import Site
from fedhpc.domain.job import JobState
from fedhpc.errors import ErrorKind, FedError
from fedhpc.ops.task_views import AttemptView, ResultManifest
from fedhpc.ops.tasks import ResultRequest
from fedhpc.placement.credit import predict_charge
from fedhpc.profiles import load_federation

__all__ = ["MAX_LIVE", "charge_rows", "charges_route", "live_charges"]

MAX_LIVE = 64  # live tasks read per refresh (one get_result each)
_LIVE = (JobState.RUNNING, JobState.PENDING, JobState.SUBMITTED)


def _live_attempts(m: ResultManifest) -> list[AttemptView]:
    """The task's attempts in play: one, or each hedged copy still in play."""
    return [a for a in m.attempts if not a.superseded and a.state in _LIVE]


def charge_rows(manifests: list[ResultManifest], sites: dict[str, Site]) -> list[dict[str, Any]]:
    """Per (site, account): the running attempts' and the queued ones' worst-case charges."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for a in (a for m in manifests for a in _live_attempts(m)):
        site = sites.get(a.site)
        if site is None or a.shape is None or a.account is None:
            continue
        spec = next((p for p in site.profile.partitions if p.name == a.partition), None)
        if spec is None:
            continue
        charge = predict_charge(site.profile, spec, a.shape)
        empty = {"site": a.site, "account": a.account, "unit": charge.unit, "jobs": 0}
        row = rows.setdefault((a.site, a.account), {**empty, "running": 0.0, "queued": 0.0})
        row["running" if a.state is JobState.RUNNING else "queued"] += charge.amount
        row["jobs"] += 1
    return [rows[k] for k in sorted(rows)]


async def live_charges(client: DaemonClient, sites: dict[str, Site]) -> dict[str, Any]:
    """The charge rows of the newest live tasks, how many were read, and whether more exist."""
    tasks = []
    for state in _LIVE:
        tasks += await client.tasks(state=state.value, limit=MAX_LIVE + 1)
    more = len(tasks) > MAX_LIVE
    found: list[ResultManifest] = []

    async def one(task_id: str) -> None:
        try:
            found.append(await client.get_result(ResultRequest(task_id=task_id, preview="none")))
        except FedError as exc:  # gone since it was listed (another store): nothing to charge
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise

    async with anyio.create_task_group() as tg:
        for t in tasks[:MAX_LIVE]:
            tg.start_soon(one, t.task_id)
    return {"charges": charge_rows(found, sites), "read": len(found), "more": more}


def charges_route() -> Callable[[Request, DaemonClient], Awaitable[dict[str, Any]]]:
    """GET /api/charges: the sites as the daemon loads them (read once), then `live_charges`."""
    loaded: dict[str, dict[str, Site]] = {}

    async def charges(request: Request, c: DaemonClient) -> dict[str, Any]:
        if "sites" not in loaded:
            loaded["sites"] = load_federation()
        return await live_charges(c, loaded["sites"])

    return charges
