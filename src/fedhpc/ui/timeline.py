"""Attempts as bars on a time axis (pure): one bar per attempt of each task, with how the
attempt came to be (first placement, re-placement, replan, retry, wall-time extension, hedged
copy) and why. A hedged task's copies are a bar each, side by side, and a copy another outran
ends where it was cancelled. Shared by the dashboard's Gantt chart and the CLI's `--timeline`
pictures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from fedhpc.domain.job import JobState
from fedhpc.ops.task_views import AttemptView, ResultManifest

__all__ = ["Bar", "Cause", "bar_json", "bars", "span", "why"]

Cause = Literal["placed", "re-placed", "replanned", "retry", "extension", "hedged"]

CAUSE_TEXT: dict[str, str] = {
    "placed": "first placement",
    "re-placed": (
        "re-placed: the previous attempt was still pending where another site could start it sooner"
    ),
    "replanned": "replanned on request",
    "retry": "retry after a failure",
    "extension": "wall-time extension after a timeout",
    "hedged": "hedged copy: submitted beside another, the first to start runs",
}


@dataclass(frozen=True)
class Bar:
    """One attempt: where, when (submitted, started, ended), how it came to be, and why."""

    task_id: str
    name: str | None
    group_id: str | None
    n: int
    site: str
    partition: str
    state: JobState
    job_id: str | None
    submitted: datetime | None
    started: datetime | None
    ended: datetime | None
    cause: Cause
    superseded: bool
    reason: str
    decision: str
    wall_s: int | None
    copy_of: int | None = None  # a hedged copy: the attempt it was submitted beside
    outrun_by: int | None = None  # a copy cancelled because this attempt started or ended first

    @property
    def label(self) -> str:
        return f"{self.name or self.task_id} #{self.n}"


def _cause(prev: AttemptView | None, this: AttemptView) -> Cause:
    if this.copy_of is not None:
        return "hedged"
    if prev is None:
        return "placed"
    if prev.superseded:
        return "replanned" if (prev.reason or "").startswith("replanned") else "re-placed"
    if prev.state is JobState.TIMEOUT:
        return "extension"
    if prev.state in (JobState.FAILED, JobState.UNSCHEDULABLE):
        return "retry"
    if prev.shape and this.shape and this.shape.wall_time_s > prev.shape.wall_time_s:
        return "extension"
    return "retry"


def _root(a: AttemptView) -> int:
    """The attempt a hedged copy was submitted beside (itself for any other attempt)."""
    return a.n if a.copy_of is None else a.copy_of


def _cancelled_at(a: AttemptView, by_n: dict[int, AttemptView]) -> datetime | None:
    """When a copy another outran was cancelled, until its scheduler says when it ended: at the
    winner's start for a copy that had not started, at the winner's end for one that ran."""
    winner = by_n.get(a.outrun_by) if a.outrun_by is not None else None
    if a.ended_at is not None or winner is None:
        return a.ended_at
    if a.started_at is None:
        return winner.started_at
    return winner.ended_at or winner.started_at


def bars(manifests: Sequence[ResultManifest]) -> list[Bar]:
    """Every attempt of every manifest, in task order then attempt order: a hedged task's
    copies are a bar each, and the placement's decision is on every copy of the newest
    placement still in play."""
    out: list[Bar] = []
    for m in manifests:
        decision = m.provenance.decision if m.provenance else ""
        prev: AttemptView | None = None
        by_n = {a.n: a for a in m.attempts}
        newest = _root(m.attempts[-1]) if m.attempts else 0
        for a in m.attempts:
            cause = _cause(prev, a)
            live = not a.superseded and _root(a) == newest
            out.append(
                Bar(
                    task_id=m.task_id,
                    name=m.name,
                    group_id=m.group_id,
                    n=a.n,
                    site=a.site,
                    partition=a.partition,
                    state=a.state,
                    job_id=a.job_id,
                    submitted=a.submitted_at,
                    started=a.started_at,
                    ended=_cancelled_at(a, by_n),
                    cause=cause,
                    superseded=a.superseded,
                    reason=a.reason or "",
                    decision=decision if live else "",
                    wall_s=a.shape.wall_time_s if a.shape else None,
                    copy_of=a.copy_of,
                    outrun_by=a.outrun_by,
                )
            )
            prev = a
    return out


def span(items: Sequence[Bar], now: datetime) -> tuple[datetime, datetime] | None:
    """The time axis covering every bar (an unfinished bar runs until `now`)."""
    starts = [t for b in items if (t := b.submitted or b.started) is not None]
    if not starts:
        return None
    t0 = min(starts)
    return t0, max([*(b.ended or now for b in items), t0])


def why(b: Bar) -> str:
    """One line: how this attempt came to be and, where known, the placement's reason."""
    parts = [CAUSE_TEXT[b.cause]]
    if b.copy_of is not None:
        parts[0] = parts[0].replace("beside another", f"beside attempt {b.copy_of}")
    if b.outrun_by is not None:
        parts.append(f"cancelled: attempt {b.outrun_by} went first ({b.reason})")
    elif b.superseded:
        parts.append(f"superseded ({b.reason})" if b.reason else "superseded")
    elif b.reason:
        parts.append(b.reason)
    if b.decision:
        parts.append(f"placement: {b.decision}")
    return "; ".join(parts)


def bar_json(b: Bar) -> dict[str, Any]:
    """A bar for the dashboard (JSON; times as ISO 8601 UTC)."""

    def iso(t: datetime | None) -> str | None:
        return t.isoformat() if t else None

    return {
        "task_id": b.task_id,
        "name": b.name,
        "group_id": b.group_id,
        "n": b.n,
        "label": b.label,
        "site": b.site,
        "partition": b.partition,
        "state": b.state.value,
        "job_id": b.job_id,
        "submitted": iso(b.submitted),
        "started": iso(b.started),
        "ended": iso(b.ended),
        "cause": b.cause,
        "superseded": b.superseded,
        "reason": b.reason,
        "decision": b.decision,
        "wall_s": b.wall_s,
        "copy_of": b.copy_of,
        "outrun_by": b.outrun_by,
        "why": why(b),
    }
