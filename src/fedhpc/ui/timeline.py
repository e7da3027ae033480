"""Attempts as bars on a time axis (pure): one bar per attempt of each task, with how the
attempt came to be (first placement, re-placement, replan, retry, wall-time extension) and why.
Shared by the dashboard's Gantt chart and the CLI's `--timeline` pictures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from fedhpc.domain.job import JobState
from fedhpc.ops.task_views import AttemptView, ResultManifest

__all__ = ["Bar", "Cause", "bar_json", "bars", "span", "why"]

Cause = Literal["placed", "re-placed", "replanned", "retry", "extension"]

CAUSE_TEXT: dict[str, str] = {
    "placed": "first placement",
    "re-placed": (
        "re-placed: the previous attempt was still pending where another site could start it sooner"
    ),
    "replanned": "replanned on request",
    "retry": "retry after a failure",
    "extension": "wall-time extension after a timeout",
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

    @property
    def label(self) -> str:
        return f"{self.name or self.task_id} #{self.n}"


def _cause(prev: AttemptView | None, this: AttemptView) -> Cause:
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


def bars(manifests: Sequence[ResultManifest]) -> list[Bar]:
    """Every attempt of every manifest, in task order then attempt order."""
    out: list[Bar] = []
    for m in manifests:
        decision = m.provenance.decision if m.provenance else ""
        prev: AttemptView | None = None
        for a in m.attempts:
            cause = _cause(prev, a)
            live = not a.superseded and a is m.attempts[-1]
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
                    ended=a.ended_at,
                    cause=cause,
                    superseded=a.superseded,
                    reason=a.reason or "",
                    decision=decision if live else "",
                    wall_s=a.shape.wall_time_s if a.shape else None,
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
    if b.superseded:
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
        "why": why(b),
    }
