"""The start fedhpc predicted for a task waiting at a scheduler, as data for the dashboard
(pure). The daemon words the why-pending sentence once for every face (`waiting`, from
`fedhpc.ops.pending.pending_note`), with that start in UTC; the page names every time in the
zone the person picked, so it is given the instant and the text the sentence printed for it,
and writes that text in its zone."""

from __future__ import annotations

from datetime import UTC, datetime

from fedhpc.domain.job import JobState
from fedhpc.ops.pending import predicted_wait
from fedhpc.ops.task_views import ResultManifest

__all__ = ["predicted_start"]


def predicted_start(m: ResultManifest) -> dict[str, str] | None:
    """For a task whose live attempt waits at a scheduler (not started) and whose placement
    predicted a wait: `at`, the predicted start (ISO 8601, UTC), and `shown`, that start as the
    daemon's sentence prints it (`2026-12-04 22:01:00 UTC`). None otherwise."""
    live = [a for a in m.attempts if not a.superseded]
    a = live[-1] if live else None
    if a is None or a.started_at is not None or a.submitted_at is None:
        return None
    if a.state not in (JobState.SUBMITTED, JobState.PENDING) or m.provenance is None:
        return None
    est = predicted_wait(m.provenance.decision)
    if est is None:
        return None
    # As pending_note computes it: the attempt's submission plus the predicted wait, in UTC.
    since = a.submitted_at.astimezone(UTC)
    start = datetime.fromtimestamp(since.timestamp() + est[0], UTC)
    return {
        "at": start.isoformat(),
        "shown": f"{start.strftime('%Y-%m-%d %H:%M:%S')} UTC",
    }
