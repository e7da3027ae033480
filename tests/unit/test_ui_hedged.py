"""A hedged task's copies everywhere an attempt is shown (issue 42): the dashboard's why-pending
starts (`test_ui_pending`), the charges table (every copy in play commits its charge, as the
daemon's ledger counts it) and the timeline (a bar per copy, the outrun copy's ending at its
cancel). The task's answer carries what they need: each attempt's `copy_of`, `outrun_by` and
the wait its placement predicted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fedhpc.domain import ChargeKind, ChargeModel
from fedhpc.domain.job import JobState, Shape
from fedhpc.ops.task_views import AttemptView, Provenance, ResultManifest
from fedhpc.placement.spend import ledger_rows
from fedhpc.store import Store
from fedhpc.ui.charges import charge_rows
from fedhpc.ui.pending import predicted_start
from fedhpc.ui.term import timeline_table
from fedhpc.ui.timeline import bar_json, bars, why
from tests.unit.test_hedging import _hedged, _placed, _world
from tests.unit.test_placement_world import cpu_partition, profile, site

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
SHAPE = Shape(cpus=4, wall_time_s=3600)


def _at(s: float | None) -> datetime | None:
    return None if s is None else T0 + timedelta(seconds=s)


def _att(n: int, site: str, state: JobState, **kw: Any) -> AttemptView:
    times = {k: _at(kw.pop(k, None)) for k in ("started_at", "ended_at")}
    return AttemptView(
        n=n,
        site=site,
        partition="p",
        state=state,
        account="proj",
        shape=SHAPE,
        submitted_at=T0,
        **times,
        **kw,
    )


def _m(*atts: AttemptView, state: JobState = JobState.PENDING) -> ResultManifest:
    return ResultManifest(task_id="t1", name="t1", state=state, attempts=atts)


OUTRUN = "hedged copy: cancelled, attempt 2 started first on beta"


def test_each_copy_is_a_bar_and_the_outrun_one_ends_where_it_was_cancelled() -> None:
    waiting = _m(
        _att(1, "alpha", JobState.PENDING),
        _att(2, "beta", JobState.PENDING, copy_of=1),
    )
    (first, copy) = bars([waiting])
    assert [(b.n, b.site, b.cause) for b in (first, copy)] == [
        (1, "alpha", "placed"),
        (2, "beta", "hedged"),  # not a "retry" of attempt 1
    ]
    assert why(copy).startswith("hedged copy: submitted beside attempt 1")
    # The copy that started first runs; the other was cancelled at that start, never ran.
    won = _m(
        _att(1, "alpha", JobState.PENDING, superseded=True, outrun_by=2, reason=OUTRUN),
        _att(2, "beta", JobState.RUNNING, copy_of=1, started_at=40),
        state=JobState.RUNNING,
    )
    (loser, winner) = bars([won])
    assert loser.ended == T0 + timedelta(seconds=40) and loser.started is None
    assert winner.ended is None  # still running
    assert "cancelled: attempt 2 went first" in why(loser)
    assert bar_json(loser)["outrun_by"] == 2 and bar_json(winner)["copy_of"] == 1
    # Its scheduler's own end, once read, is the bar's end.
    seen = won.model_copy(
        update={"attempts": (won.attempts[0].model_copy(update={"ended_at": _at(42)}),)}
    )
    assert bars([seen])[0].ended == T0 + timedelta(seconds=42)
    # Both ran; the one that finished first is the result, the other cancelled at its end.
    finished = _m(
        _att(1, "alpha", JobState.COMPLETED, started_at=10, ended_at=70),
        _att(2, "beta", JobState.RUNNING, copy_of=1, started_at=12, superseded=True, outrun_by=1),
        state=JobState.COMPLETED,
    )
    assert bars([finished])[1].ended == T0 + timedelta(seconds=70)
    picture = timeline_table(bars([won]), title="t1", width=20, now=T0 + timedelta(seconds=60))
    assert picture is not None


def test_the_decision_is_on_every_copy_in_play_of_the_newest_placement() -> None:
    prov = Provenance(
        envelope_source="user", policy="best-feasible", decision="d", candidates=2, feasible=2
    )
    m = _m(
        _att(1, "alpha", JobState.PENDING),
        _att(2, "beta", JobState.PENDING, copy_of=1),
    ).model_copy(update={"provenance": prov})
    assert [b.decision for b in bars([m])] == ["d", "d"]


def test_every_copy_in_play_commits_its_charge_as_the_ledger_counts_it() -> None:
    cores = ChargeModel(kind=ChargeKind.CORE_HOURS)
    alpha = site(profile("alpha", cpu_partition("p"), charge=cores))
    beta = site(profile("beta", cpu_partition("p"), charge=cores))
    sites = {"alpha": alpha, "beta": beta}
    m = _m(
        _att(1, "alpha", JobState.PENDING),
        _att(2, "beta", JobState.PENDING, copy_of=1),
    )

    def ledger(m: ResultManifest) -> list[dict[str, object]]:
        """The daemon's ledger rows for the task's attempts (`GET /v1/ledger`)."""
        attempts = [
            {
                "task_id": "t1",
                "owner": None,
                "site": a.site,
                "partition": a.partition,
                "state": a.state.value,
                "body": {
                    "account": a.account,
                    "shape": SHAPE.model_dump(mode="json"),
                    "superseded": a.superseded,
                },
            }
            for a in m.attempts
        ]
        return ledger_rows(attempts, sites)

    rows = charge_rows(ledger(m))
    # 4 cores for an hour at rate 1, waiting at each site: each copy commits its worst case.
    assert [(r["site"], r["queued"], r["jobs"]) for r in rows] == [
        ("alpha", 4.0, 1),
        ("beta", 4.0, 1),
    ]
    # Once one starts, the other is set aside: it commits nothing, the runner its charge.
    won = _m(
        _att(1, "alpha", JobState.PENDING, superseded=True, outrun_by=2),
        _att(2, "beta", JobState.RUNNING, copy_of=1, started_at=40),
    )
    assert [(r["site"], r["running"], r["jobs"]) for r in charge_rows(ledger(won))] == [
        ("beta", 4.0, 1)
    ]


async def test_a_hedged_tasks_attempts_say_which_is_a_copy_and_its_predicted_wait(
    store: Store,
) -> None:
    """What the task's answer shows of each attempt (`AttemptRecord.view`, as get_result
    builds it) after the orchestrator hedged a task on two sites."""
    o, _, _ = _world(store)
    task_id, atts = await _placed(o, _hedged())
    shown = tuple(a.view() for a in atts)
    assert [(a.n, a.copy_of) for a in shown] == [(1, None), (2, 1)]
    assert all(a.predicted_wait_s is not None for a in shown)
    task = await o.book.load_task(task_id)
    m = ResultManifest(
        task_id=task_id, state=task.state, attempts=shown, provenance=task.provenance
    )
    start = predicted_start(m)
    assert start is not None
    assert [(c["n"], c["site"]) for c in start["copies"]] == [(a.n, a.site) for a in atts]
