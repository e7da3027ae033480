"""The start fedhpc predicted for a waiting task, as data for the dashboard: the instant, and
the very text the daemon's why-pending sentence prints for it in UTC (the page writes that text
in the zone the person picked)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from fedhpc.domain.job import JobState
from fedhpc.ops.pending import pending_note
from fedhpc.ops.task_views import AttemptView, Provenance, ResultManifest
from fedhpc.ui.pending import predicted_start

T0 = datetime(2026, 12, 4, 22, 0, 0, tzinfo=UTC)
DECISION = "devanvil/ai (fastest): est. wait 90s (learned:ai (n=3)) + run 300s; 3 feasible of 8"


def _manifest(*attempts: AttemptView, decision: str = DECISION) -> ResultManifest:
    prov = Provenance(
        envelope_source="user", policy="fastest", decision=decision, candidates=8, feasible=3
    )
    return ResultManifest(task_id="t1", state=JobState.PENDING, attempts=attempts, provenance=prov)


def _attempt(**kw: object) -> AttemptView:
    base: dict[str, object] = {
        "n": 1,
        "site": "devanvil",
        "partition": "ai",
        "state": JobState.PENDING,
        "job_id": "42",
        "reason": "Priority",
        "submitted_at": T0,
    }
    return AttemptView.model_validate({**base, **kw})


def test_the_start_is_the_one_the_sentence_names() -> None:
    m = _manifest(_attempt())
    start = predicted_start(m)
    assert start == {"at": "2026-12-04T22:01:30+00:00", "shown": "2026-12-04 22:01:30 UTC"}
    note = pending_note(m, T0 + timedelta(seconds=20))
    assert note is not None and f"start about {start['shown']}" in note


def test_a_start_given_in_another_zone_is_the_same_instant() -> None:
    kolkata = T0.astimezone(ZoneInfo("Asia/Kolkata"))
    start = predicted_start(_manifest(_attempt(submitted_at=kolkata)))
    assert start is not None and start["shown"] == "2026-12-04 22:01:30 UTC"
    assert datetime.fromisoformat(start["at"]) == T0 + timedelta(seconds=90)


def test_no_start_without_a_waiting_attempt_or_a_predicted_wait() -> None:
    started = _attempt(state=JobState.RUNNING, started_at=T0 + timedelta(seconds=5))
    moved = _attempt(superseded=True)
    assert predicted_start(_manifest(started)) is None
    assert predicted_start(_manifest(moved)) is None
    assert predicted_start(_manifest(_attempt(), decision="devanvil/ai (fixed site)")) is None
    assert predicted_start(_manifest()) is None
