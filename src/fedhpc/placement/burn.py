"""Burn-down of an allocation against its expiry (issue 42): from the credit left at each probe,
the pace it is being spent at, the even pace that would spend it down to its reserve exactly on
its last day, and when it runs out at the recent pace. Pure: the caller gives the points and
`now`. Shown on the dashboard's credit chart and by `GET /v1/history?credit=true`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

__all__ = ["Burn", "burn_down"]

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class Burn:
    """One account's burn-down. Paces are in the site's unit per day; None where unknown."""

    expires: str  # the allocation's last day (ISO date)
    days_left: float  # until the end of that day (0 once it has passed)
    left: float | None  # credit left at the newest probe, above the reserve
    even_per_day: float | None  # the pace that spends `left` exactly by the expiry
    recent_per_day: float | None  # the pace over the probes given (None: fewer than two)
    runs_out: str | None  # at the recent pace (ISO time), when before the expiry
    unused_at_expiry: float | None  # left over at the recent pace, when it lasts past it
    verdict: str  # one line for a person

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def burn_down(
    points: Sequence[tuple[datetime, float | None]],
    *,
    expires: date,
    reserve: float,
    now: datetime,
    unit: str,
) -> Burn:
    """`points`: (probe time, credit left) oldest first; `reserve` is never to be spent."""
    end = datetime.combine(expires, time.max, tzinfo=UTC)
    days_left = max(0.0, (end - now).total_seconds() / DAY_S)
    known = [(t, v) for t, v in points if v is not None]
    if not known:
        return Burn(expires.isoformat(), days_left, None, None, None, None, None, "no credit read")
    (t0, v0), (t1, v1) = known[0], known[-1]
    left = max(0.0, v1 - reserve)
    even = left / days_left if days_left > 0 else None
    span_days = (t1 - t0).total_seconds() / DAY_S
    recent = (v0 - v1) / span_days if span_days > 0 else None
    runs_out = unused = None
    if days_left <= 0:
        verdict = f"expired on {expires.isoformat()}: {left:.2f} {unit} left unspent"
    elif recent is None:
        verdict = f"{left:.2f} {unit} to spend in {days_left:.0f} days (one probe: no pace yet)"
    elif recent <= 0:
        unused = left
        verdict = (
            f"nothing spent lately: {left:.2f} {unit} would be left unspent on "
            f"{expires.isoformat()}"
        )
    else:
        out = t1 + timedelta(days=left / recent)
        if out < end:
            runs_out = out.isoformat()
            verdict = (
                f"at {recent:.2f} {unit}/day it runs out on {out.date().isoformat()}, "
                f"{(end - out).days} days before it expires"
            )
        else:
            unused = left - recent * days_left
            verdict = (
                f"at {recent:.2f} {unit}/day, {unused:.2f} {unit} would be left unspent on "
                f"{expires.isoformat()} (the even pace is {even or 0:.2f} {unit}/day)"
            )
    return Burn(expires.isoformat(), days_left, left, even, recent, runs_out, unused, verdict)
