"""`pending_note`: a task at a scheduler that has not started says where it waits, the
scheduler's reason in plain words, and the start fedhpc predicted at placement."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fedhpc.domain.job import JobState
from fedhpc.ops.pending import pending_note, predicted_wait
from fedhpc.ops.task_views import AttemptView, Provenance, ResultManifest

T0 = datetime(2026, 12, 4, 22, 0, 0, tzinfo=UTC)
DECISION = "devanvil/ai (fastest): est. wait 60s (scheduler) + run 300s; 3 feasible of 8"


def _manifest(*attempts: AttemptView, state: JobState = JobState.PENDING) -> ResultManifest:
    prov = Provenance(
        envelope_source="user", policy="fastest", decision=DECISION, candidates=8, feasible=3
    )
    return ResultManifest(task_id="t1", state=state, attempts=attempts, provenance=prov)


def _attempt(**kw: object) -> AttemptView:
    base: dict[str, object] = {
        "n": 1,
        "site": "devanvil",
        "partition": "ai",
        "state": JobState.PENDING,
        "job_id": "42",
        "submitted_at": T0,
    }
    return AttemptView.model_validate({**base, **kw})


def test_a_pending_job_says_its_reason_and_the_predicted_start() -> None:
    note = pending_note(_manifest(_attempt(reason="Priority")), T0 + timedelta(seconds=30))
    assert note == (
        "pending in devanvil/ai's queue (job 42) for 30 s; scheduler's reason: Priority (jobs "
        "of higher priority are ahead in this partition); fedhpc predicted a 60 s wait "
        "(the scheduler's estimate): start about 2026-12-04 22:01:00 UTC"
    )


def test_a_job_past_its_predicted_start_says_how_late_it_is() -> None:
    note = pending_note(_manifest(_attempt(reason="Resources")), T0 + timedelta(minutes=5))
    assert note is not None
    assert "for 300 s" not in note and "for 5 min" in note
    assert note.endswith("start about 2026-12-04 22:01:00 UTC, 4 min late")
    assert "Resources (next in line, waiting for nodes to free up)" in note


def test_an_unknown_reason_is_quoted_and_a_limit_is_named() -> None:
    weird = pending_note(_manifest(_attempt(reason="Odd")), T0)
    limit = pending_note(_manifest(_attempt(reason="QOSMaxJobsPerUserLimit")), T0)
    none = pending_note(_manifest(_attempt(state=JobState.SUBMITTED)), T0)
    assert weird is not None and "scheduler's reason: Odd;" in weird
    assert limit is not None and "a limit of its account or QOS holds it" in limit
    assert none is not None and "no reason from the scheduler yet" in none


def test_the_live_attempt_is_the_one_told_not_a_moved_one() -> None:
    moved = _attempt(superseded=True, state=JobState.CANCELLED, reason="Priority")
    live = _attempt(n=2, site="devdelta", partition="gpuA100x4", job_id="7", reason=None)
    note = pending_note(_manifest(moved, live), T0)
    assert note is not None and note.startswith("pending in devdelta/gpuA100x4's queue (job 7)")


def test_running_finished_queued_and_held_tasks_have_no_note() -> None:
    started = _attempt(state=JobState.RUNNING, started_at=T0)
    assert pending_note(_manifest(started, state=JobState.RUNNING), T0) is None
    done = _attempt(state=JobState.COMPLETED, started_at=T0, ended_at=T0)
    assert pending_note(_manifest(done, state=JobState.COMPLETED), T0) is None
    assert pending_note(_manifest(state=JobState.QUEUED), T0) is None
    held = _manifest(_attempt()).model_copy(update={"waiting": "held: 4 of 4 jobs"})
    assert pending_note(held, T0) is None  # fedhpc's own reason stays


def test_the_predicted_wait_is_read_from_the_decision() -> None:
    assert predicted_wait(DECISION) == (60.0, "the scheduler's estimate")
    learned = "x/y (fastest): est. wait 12.5s (learned:partition (n=12); no scheduler estimate: "
    learned += "PBS Pro has no start-estimate command (qsub has no will-run test)) + run 1s"
    assert predicted_wait(learned) == (12.5, "learned from past waits")
    paper = "x/y (fastest): est. wait 3s (paper:free-slots=2) + run 9s; 1 feasible of 1"
    assert predicted_wait(paper) == (3.0, "from the queue it saw")
    assert predicted_wait("queued: placing") is None


def test_a_hedged_task_names_every_copy_and_tells_the_first_ones_wait() -> None:
    first = _attempt(reason="Priority")
    copy = _attempt(n=2, site="devdelta", partition="cpu", job_id="7", reason="Resources")
    note = pending_note(_manifest(first, copy), T0 + timedelta(seconds=30))
    assert note is not None
    assert note.startswith(
        "pending in devanvil/ai's queue (job 42) for 30 s; hedged: also pending at "
        "devdelta/cpu (job 7), the first to start runs, the others are cancelled; "
        "scheduler's reason: Priority"
    ), note
    assert "start about 2026-12-04 22:01:00 UTC" in note  # the first copy's placement
    # Once one copy started, the task no longer waits.
    running = _attempt(n=2, site="devdelta", partition="cpu", state=JobState.RUNNING, started_at=T0)
    outrun = _attempt(superseded=True, reason="hedged copy: cancelled")
    assert pending_note(_manifest(outrun, running), T0) is None
