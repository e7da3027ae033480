"""What each person's work charged, per site account, from stored attempts (issue 34: the
credit ledger is a person's too). Used: every ended attempt's charge over the time it ran;
committed: every live attempt's worst case (its whole granted wall time), both at the
partition's charge (`predict_charge`; its live billing weights where they apply). Read by
`GET /v1/ledger` and by placement, which bounds a person's spending at a site by the site's
`person_budget`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from fedhpc.domain.config import Site
from fedhpc.domain.job import JobState, Shape
from fedhpc.domain.site import SiteState
from fedhpc.placement.credit import Charge, live_spec, predict_charge

__all__ = ["ledger_rows", "spent_per_site"]

log = structlog.get_logger(__name__)
_LIVE = {JobState.SUBMITTED.value, JobState.PENDING.value, JobState.RUNNING.value}
_SUMS = ("used", "committed", "running", "queued")


def _charged(
    a: dict[str, Any], sites: Mapping[str, Site], states: Mapping[str, SiteState]
) -> tuple[str, bool, Charge] | None:
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
    state = states.get(site.name)
    spec = live_spec(site.profile, spec, state.partition(spec.name) if state else None)
    return str(account), live, predict_charge(site.profile, spec, shape)


def ledger_rows(
    attempts: list[dict[str, Any]],
    sites: Mapping[str, Site],
    *,
    states: Mapping[str, SiteState] | None = None,
    unreadable: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Per (owner, site, account): `used` by ended attempts, `committed` by live ones (of it,
    `running` by those running, `queued` by those not started yet; `live`: how many). An
    attempt on a site or partition no longer configured, or with no account, is left out; one
    that cannot be read is logged with its traceback and its task id put in `unreadable`, and
    the others are still counted. `states`: the sites' last probes, whose live billing weights
    give the charge where they replace the profile's (`credit.live_spec`)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for a in attempts:
        try:
            got = _charged(a, sites, states or {})
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
        head = {"owner": a["owner"], "site": a["site"], "account": account, "unit": charge.unit}
        row = rows.setdefault(key, {**head, "attempts": 0, "live": 0, **dict.fromkeys(_SUMS, 0.0)})
        row["attempts"] += 1
        if not live:
            row["used"] += charge.amount
            continue
        row["committed"] += charge.amount
        row["running" if a["state"] == JobState.RUNNING.value else "queued"] += charge.amount
        row["live"] += 1
    for row in rows.values():
        row.update({k: round(row[k], 4) for k in _SUMS})
    return [rows[k] for k in sorted(rows)]


def spent_per_site(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per site, (used, committed) summed over `ledger_rows`' accounts."""
    out: dict[str, tuple[float, float]] = {}
    for r in rows:
        used, committed = out.get(r["site"], (0.0, 0.0))
        out[r["site"]] = (round(used + r["used"], 4), round(committed + r["committed"], 4))
    return out
