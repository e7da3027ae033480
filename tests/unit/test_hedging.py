"""Hedged submission (issue 42): a task allowed `hedge_copies` > 1 goes to up to that many sites
when their forecasts overlap enough; the first copy to start runs and every other copy is
cancelled once, never counted as a failure; a copy refused, failed or lost while another is in
play is set aside; each person's copies per site are bounded; every decision says why it
hedged, at what cost, or why not. A real store and real placement; each site's adapter is a
fake whose jobs the test moves from pending to running to ended."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import pytest

from fedhpc.adapters.dialects.base import SchedulerRejected
from fedhpc.adapters.site import SubmittedJob
from fedhpc.adapters.transports.base import TransportError
from fedhpc.collector import Collector
from fedhpc.domain.config import HedgeConfig, Site
from fedhpc.domain.job import AccountingRecord, JobObservation, JobSpec, JobState
from fedhpc.ops.tasks import AdaptationPolicy, CancelRequest
from fedhpc.orchestrator.records import AttemptRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import PolicyKind
from fedhpc.placement.hedge import Forecast, choose_copies, expected_first
from fedhpc.placement.trace import Estimates
from fedhpc.store import Store
from tests.unit.fake_submit import SubmitsOneByOne
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state
from tests.unit.test_submit_accept import Clock, _req

# --- the arithmetic ---------------------------------------------------------------------


def _est(wait_s: float, p90_s: float, band: tuple[float, float, float] | None = None) -> Estimates:
    return Estimates(
        wait_s=wait_s,
        wait_p90_s=p90_s,
        wait_source="test",
        runtime_s=100.0,
        runtime_source="test",
        env_s=0.0,
        env_source="test",
        completion_s=wait_s + 100,
        completion_p90_s=p90_s + 100,
        charge=1.0,
        charge_unit="SU",
        credit_fraction=0.0,
        waste=0,
        wait_band=band,
    )


def test_two_equal_uncertain_waits_finish_sooner_by_sigma_over_root_pi() -> None:
    one = Forecast(offset=100, mean_s=1000, sigma_s=300)  # far from 0: no clipping
    alone, both = expected_first([one]), expected_first([one, one])
    assert alone == pytest.approx(1100, abs=1)
    assert alone - both == pytest.approx(300 / math.sqrt(math.pi), abs=2)  # E[min] of 2 normals


def test_exact_forecasts_gain_nothing_and_a_later_copy_never_hurts() -> None:
    soon, late = Forecast(100, 50, 0), Forecast(100, 400, 0)
    assert expected_first([soon]) == pytest.approx(150, abs=0.01)
    assert expected_first([soon, late]) == pytest.approx(150, abs=0.01)
    assert expected_first([late, soon]) == pytest.approx(150, abs=0.01)


def test_copies_are_chosen_while_each_gains_enough() -> None:
    best = _est(600, 1800)  # an uncertain queue
    twin, sure_late = _est(600, 1800), _est(5000, 5000)
    picked = choose_copies(best, [sure_late, twin], copies=3, min_gain_s=60)
    assert picked.picked == (1,)  # the twin overlaps; a sure 5,000 s wait never helps
    assert picked.gain_s > 60
    assert choose_copies(best, [twin], copies=1, min_gain_s=0).picked == ()  # one copy: alone
    assert choose_copies(best, [twin], copies=2, min_gain_s=10_000).picked == ()
    # The calibrated band is used where there is one: a narrow band gains little.
    narrow = _est(600, 1800, band=(590, 600, 610))
    assert choose_copies(narrow, [narrow], copies=2, min_gain_s=60).picked == ()
    # Unknown waits are never hedged on.
    assert choose_copies(_est(math.inf, math.inf), [twin], copies=2, min_gain_s=0).picked == ()


# --- the daemon ---------------------------------------------------------------------------

ALPHA = site(profile("alpha", cpu_partition("p"), min_refresh_s=1))
BETA = site(profile("beta", cpu_partition("p"), min_refresh_s=1))


class _Site(SubmitsOneByOne):
    """A scheduler the test drives: each job pending until `jobs[id]` says otherwise; ended
    jobs answer from accounting; `refuse` refuses every submission."""

    login = "alice"
    roots: dict[str, str] = {}  # noqa: RUF012  (its profile names no $NAME root)
    dialect = None

    def __init__(self, s: Site, first_id: int) -> None:
        self.site, self.name = s, s.name
        self.next_id = first_id
        self.jobs: dict[str, JobState] = {}
        self.names: dict[str, str] = {}  # job id -> job name
        self.cancelled: list[str] = []
        self.refuse = False
        self.lost = False  # a submission whose outcome never comes back (sbatch not run)
        self.calls: dict[str, int] = {}  # remote calls counted per cycle (none here)

    def observe_due(self) -> bool:
        return True

    def observe_answered(self) -> None:
        return None

    def observe_refused(self) -> float:
        return 0.0

    def parent_id(self, job_id: str) -> str:
        return job_id

    def root_path(self, path: str) -> str:
        return path

    async def probe(self, *, timeout_s: float) -> Any:
        return state(self.site.profile)

    async def submit(self, spec: JobSpec, *, ensure_dirs: Sequence[str] = ()) -> SubmittedJob:
        if self.refuse:
            raise SchedulerRejected(f"sbatch: error: {self.name} refuses it")
        if self.lost:
            raise TransportError(f"{self.name}: connection reset during sbatch")
        job = str(self.next_id)
        self.next_id += 1
        self.jobs[job], self.names[job] = JobState.PENDING, spec.name
        return SubmittedJob(self.name, job, "")

    async def find(self, names: Sequence[str]) -> dict[str, str]:
        return {}

    async def status(self, job_ids: Sequence[str]) -> list[JobObservation]:
        return [
            JobObservation(job_id=j, state=self.jobs[j], native_state=self.jobs[j].name)
            for j in job_ids
            if j in self.jobs and not self.jobs[j].terminal
        ]

    async def accounting(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        return [
            AccountingRecord(
                job_id=j,
                state=self.jobs[j],
                native_state=self.jobs[j].name,
                partition="p",
                submit=NOW,
                start=NOW,
                end=NOW + timedelta(seconds=5),
                exit_code=0 if self.jobs[j] is JobState.COMPLETED else 1,
            )
            for j in job_ids
            if j in self.jobs and self.jobs[j].terminal
        ]

    async def cancel(self, job_ids: Sequence[str]) -> None:
        self.cancelled.extend(job_ids)
        for j in job_ids:
            if not self.jobs[j].terminal:
                self.jobs[j] = JobState.CANCELLED


def _world(
    store: Store, *, hedge: HedgeConfig | None = None, beta: Site = BETA, grace_s: float = 45
) -> tuple[Orchestrator, _Site, _Site]:
    alpha, b = _Site(ALPHA, 100), _Site(beta, 200)
    clock = Clock()
    collector = Collector({"alpha": ALPHA, "beta": beta}, {}, store, clock=clock)
    collector.latest = {"alpha": state(ALPHA.profile), "beta": state(beta.profile)}
    collector.ready.set()
    o = Orchestrator(
        store,
        collector,
        {"alpha": cast(Any, alpha), "beta": cast(Any, b)},
        clock=clock,
        retry_window_s=120,
        default_hedge=hedge or HedgeConfig(),
        intent_grace_s=grace_s,
    )
    return o, alpha, b


def _hedged(n: int = 0, **adapt: Any) -> Any:
    policy = AdaptationPolicy.model_validate({"hedge_copies": 2, "hedge_min_gain_s": 0} | adapt)
    return _req(command=("echo", str(n)), adaptation=policy)


async def _placed(o: Orchestrator, req: Any) -> tuple[str, list[AttemptRecord]]:
    task_id = (await o.intake.submit_task(req, wait_s=0)).task_id
    await o.place_queued()
    return task_id, await o.book.load_attempts(task_id)


def _sites(*sites: _Site) -> dict[str, _Site]:
    return {s.name: s for s in sites}


async def test_a_hedged_task_goes_to_two_sites_and_its_decision_says_why_and_the_cost(
    store: Store,
) -> None:
    o, alpha, beta = _world(store)
    task_id, atts = await _placed(o, _hedged())
    assert [(a.n, a.copy_of) for a in atts] == [(1, None), (2, 1)]
    assert {a.site for a in atts} == {"alpha", "beta"}
    assert len(alpha.jobs) == len(beta.jobs) == 1  # one submission each
    task = await o.book.load_task(task_id)
    other = atts[1]
    assert f"hedged: also on {other.site}/p" in task.decision
    assert "cost: 1 more submission, cancelled when one copy starts" in task.decision
    assert task.decision.startswith("est. wait ")  # the placement's line comes first
    # The provenance's whole line names the first copy's site and carries the hedge too.
    assert task.provenance is not None
    assert task.provenance.decision.startswith(f"{atts[0].site}/p (best-feasible)")
    assert f"hedged: also on {other.site}/p" in task.provenance.decision
    # The answer names the first copy (the decision names the other).
    assert (await o.book.latest_attempt(task_id)).n == 1  # type: ignore[union-attr]


async def test_the_first_copy_to_start_runs_and_the_other_is_cancelled_never_a_failure(
    store: Store,
) -> None:
    o, alpha, beta = _world(store)
    task_id, atts = await _placed(o, _hedged())
    sites = _sites(alpha, beta)
    first, second = (sites[a.site] for a in atts)
    (job1,), (job2,) = first.jobs, second.jobs
    second.jobs[job2] = JobState.RUNNING  # the copy starts first
    await o.tick()
    assert first.cancelled == [job1] and second.cancelled == []  # sent in the same cycle
    a1, a2 = await o.book.load_attempts(task_id)
    assert a1.superseded and a1.outrun_by == 2 and not a1.cancel_pending
    assert a1.reason == f"hedged copy: cancelled, attempt 2 started first on {second.name}"
    assert not a2.superseded
    await o.tick()  # the loser's cancelled end: no retry, no event
    second.jobs[job2] = JobState.COMPLETED
    await o.tick()
    task = await o.book.load_task(task_id)
    assert task.state is JobState.COMPLETED and task.accepted_attempt == 2
    assert task.retries_used == 0
    a1, _ = await o.book.load_attempts(task_id)
    assert a1.state is JobState.CANCELLED
    kinds = [e.kind for e in await store.events_after(0, limit=100) if e.subject == task_id]
    assert kinds == ["task.terminal"]
    assert first.cancelled == [job1]  # cancelled once


async def test_two_copies_started_together_one_runs_to_the_end_and_one_result(
    store: Store,
) -> None:
    o, alpha, beta = _world(store)
    task_id, _ = await _placed(o, _hedged())
    for s in (alpha, beta):
        (job,) = s.jobs
        s.jobs[job] = JobState.RUNNING  # both seen running by the same control cycle
    await o.tick()
    cancelled = alpha.cancelled + beta.cancelled
    assert len(cancelled) == 1  # exactly one copy is cancelled
    a1, a2 = await o.book.load_attempts(task_id)
    winner, loser = (a2, a1) if a1.superseded else (a1, a2)
    assert not winner.superseded and loser.outrun_by == winner.n
    # Even if the loser's cancel came too late and it completed, its end is not the result.
    sites = _sites(alpha, beta)
    sites[loser.site].jobs[str(loser.job_id)] = JobState.COMPLETED
    await o.tick()
    ongoing = await o.book.load_task(task_id)
    assert not ongoing.state.terminal and ongoing.accepted_attempt is None
    sites[winner.site].jobs[str(winner.job_id)] = JobState.COMPLETED
    await o.tick()
    task = await o.book.load_task(task_id)
    assert task.state is JobState.COMPLETED and task.accepted_attempt == winner.n


async def test_a_copy_its_scheduler_refuses_is_set_aside_and_the_other_goes_on(
    store: Store,
) -> None:
    o, _, beta = _world(store)
    beta.refuse = True
    task_id, _ = await _placed(o, _hedged())
    atts = await o.book.load_attempts(task_id)
    refused = next(a for a in atts if a.site == "beta")
    assert refused.superseded and "set aside: its copy on alpha goes on" in (refused.reason or "")
    assert len(atts) == 2  # no fallback attempt: the alpha copy is the task's
    task = await o.book.load_task(task_id)
    assert task.state is not JobState.FAILED


async def test_a_copy_that_fails_while_another_waits_is_set_aside_not_retried(
    store: Store,
) -> None:
    o, alpha, beta = _world(store)
    task_id, atts = await _placed(o, _hedged())
    sites = _sites(alpha, beta)
    failing = sites[atts[1].site]
    (job,) = failing.jobs
    failing.jobs[job] = JobState.FAILED
    await o.tick()
    task = await o.book.load_task(task_id)
    assert task.retries_used == 0 and not task.state.terminal
    atts = await o.book.load_attempts(task_id)
    assert len(atts) == 2 and atts[1].superseded and "set aside" in (atts[1].reason or "")
    assert not atts[0].superseded
    # The task's cancel cancels every copy still in play.
    await o.tools.cancel(CancelRequest(task_id=task_id))
    assert sites[atts[0].site].cancelled == [str(atts[0].job_id)]


async def test_copies_per_person_and_site_are_bounded_and_the_decision_says_so(
    store: Store,
) -> None:
    beta = site(profile("beta", cpu_partition("p"), min_refresh_s=1), hedges_in_flight=1)
    o, _, _ = _world(store, beta=beta)
    # Equally idle sites: the preference puts every first copy on alpha, the hedge on beta.
    prefer_alpha = env(cpus=1, preferences={"partitions": ["alpha/p"]})
    first, atts = await _placed(o, _hedged(1).model_copy(update={"envelope": prefer_alpha}))
    assert [(a.site, a.copy_of) for a in atts] == [("alpha", None), ("beta", 1)]
    second, atts = await _placed(o, _hedged(2).model_copy(update={"envelope": prefer_alpha}))
    assert [a.site for a in atts] == ["alpha"]  # beta holds one copy of this person's already
    decision = (await o.book.load_task(second)).decision
    assert "not hedged: beta already has 1 hedged copies of yours (hedges_in_flight)" in decision
    # Once the first task's copy is out of play, the budget is free again.
    await o.tools.cancel(CancelRequest(task_id=first))
    _, atts = await _placed(o, _hedged(3).model_copy(update={"envelope": prefer_alpha}))
    assert [a.site for a in atts] == ["alpha", "beta"]


async def test_no_hedge_when_the_gain_is_too_small_and_the_config_sets_the_default(
    store: Store,
) -> None:
    # Idle sites: both waits are known to be ~0, so a copy gains nothing.
    o, _, _ = _world(store, hedge=HedgeConfig(copies=2, min_gain_s=60))
    task_id, atts = await _placed(o, _req(command=("echo", "plain")))
    assert len(atts) == 1
    decision = (await o.book.load_task(task_id)).decision
    assert "not hedged: a copy on" in decision and "under hedge_min_gain_s 60s" in decision
    # A task's own adaptation wins over the config.
    _, atts = await _placed(o, _hedged(1))
    assert len(atts) == 2
    # Without hedging asked anywhere, the decision says nothing of it.
    o2, _, _ = _world(store)
    task_id, atts = await _placed(o2, _req(command=("echo", "none")))
    assert len(atts) == 1 and "hedge" not in (await o2.book.load_task(task_id)).decision


async def test_a_task_pinned_to_one_site_is_never_hedged(store: Store) -> None:
    o, _, _ = _world(store)
    pinned = _hedged().model_copy(update={"policy": PolicyKind.FIXED_SITE, "fixed_site": "alpha"})
    task_id, atts = await _placed(o, pinned)
    assert [a.site for a in atts] == ["alpha"]
    assert "hedge" not in (await o.book.load_task(task_id)).decision


async def test_an_include_never_brings_back_the_site_a_copy_or_a_retry_must_avoid(
    store: Store,
) -> None:
    """sites_include once overrode the caller's exclusions: both copies went to one site,
    and a retry after `unschedulable` could go back where it failed."""
    o, _, _ = _world(store)
    both = env(cpus=1, sites_include=["alpha", "beta"])
    _, atts = await _placed(o, _hedged().model_copy(update={"envelope": both}))
    assert sorted(a.site for a in atts) == ["alpha", "beta"]
    task = await o.book.load_task(atts[0].task_id)
    again = await o.planner.decide(task, exclude=("alpha",))
    assert getattr(again, "site", None) == "beta"


async def test_a_copy_whose_submission_was_lost_is_set_aside_not_placed_again(
    store: Store,
) -> None:
    o, alpha, beta = _world(store, grace_s=0)
    beta.lost = True  # beta's sbatch never answers: its intent stays, unknown to Slurm
    task_id, atts = await _placed(o, _hedged())
    assert {a.site: a.job_id is None for a in atts} == {"alpha": False, "beta": True}
    o.clock.now += timedelta(seconds=5)  # type: ignore[attr-defined]  # the test's Clock
    await o.tick()  # the scheduler does not know it: the intent is lost
    task = await o.book.load_task(task_id)
    assert task.state is not JobState.QUEUED and task.attempts_made == 2  # not placed again
    lost = next(a for a in await o.book.load_attempts(task_id) if a.site == "beta")
    assert lost.superseded and lost.state is JobState.FAILED
    assert "its submission was lost; set aside: its copy on alpha goes on" in (lost.reason or "")
    assert len(alpha.jobs) == 1 and len(beta.jobs) == 0
