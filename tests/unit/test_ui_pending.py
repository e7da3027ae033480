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
    at, shown = "2026-12-04T22:01:30+00:00", "2026-12-04 22:01:30 UTC"
    where = {"n": 1, "site": "devanvil", "partition": "ai"}
    assert start == {"at": at, "shown": shown, "copies": [where | {"at": at, "shown": shown}]}
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


def test_a_hedged_task_has_a_start_for_every_copy_that_waits_each_named_by_the_sentence() -> None:
    """Two copies wait at two sites: the page gets each copy's site and the start placement
    predicted for it there (the copy's own placement), each as the sentence prints it."""
    first = _attempt()
    copy = _attempt(n=2, site="devdelta", partition="cpu", job_id="7", copy_of=1)
    copy = copy.model_copy(update={"predicted_wait_s": 240.0, "submitted_at": T0})
    m = _manifest(first, copy)
    start = predicted_start(m)
    assert start is not None
    assert [(c["n"], c["site"], c["at"]) for c in start["copies"]] == [
        (1, "devanvil", "2026-12-04T22:01:30+00:00"),  # the decision's 90 s
        (2, "devdelta", "2026-12-04T22:04:00+00:00"),  # its own placement's 240 s
    ]
    note = pending_note(m, T0 + timedelta(seconds=20))
    assert note is not None
    for c in start["copies"]:
        assert f"start about {c['shown']}" in note
    assert "devdelta/cpu (job 7, start about 2026-12-04 22:04:00 UTC)" in note
    # A copy set aside (outrun) is no longer waited on.
    outrun = copy.model_copy(update={"superseded": True, "outrun_by": 1})
    only = predicted_start(_manifest(first, outrun))
    assert only is not None and [c["n"] for c in only["copies"]] == [1]


def test_a_copy_left_alone_waits_on_its_own_prediction_not_the_first_ones() -> None:
    failed = _attempt(state=JobState.FAILED, superseded=True)
    copy = _attempt(n=2, site="devdelta", partition="cpu", copy_of=1, predicted_wait_s=240.0)
    start = predicted_start(_manifest(failed, copy))
    assert start is not None and start["at"] == "2026-12-04T22:04:00+00:00"
    note = pending_note(_manifest(failed, copy), T0)
    assert note is not None and "predicted a 4 min wait (its copy's placement)" in note
