"""A re-placement is hedged as a first placement is (issue 42): a retry after a failure, under
the task's hedging policy and each person's per-site budget, with copies never on a site the
retry must avoid. The world (fake schedulers the test drives, a real store and placement) is
`test_hedging`'s."""

from __future__ import annotations

from fedhpc.domain.config import HedgeConfig
from fedhpc.domain.job import JobState
from fedhpc.store import Store
from tests.unit.test_hedging import _hedged, _placed, _sites, _world
from tests.unit.test_submit_accept import _req


async def test_a_retry_after_both_copies_failed_is_hedged_again(store: Store) -> None:
    o, alpha, beta = _world(store)
    task_id, atts = await _placed(o, _hedged())
    sites = _sites(alpha, beta)
    for a in reversed(atts):  # the copy fails first (set aside), then the first one: a retry
        (job,) = [j for j, s in sites[a.site].jobs.items() if not s.terminal]
        sites[a.site].jobs[job] = JobState.FAILED
        await o.tick()
    task = await o.book.load_task(task_id)
    assert task.retries_used == 1
    atts = await o.book.load_attempts(task_id)
    assert [(a.n, a.copy_of) for a in atts] == [(1, None), (2, 1), (3, None), (4, 3)]
    assert {atts[2].site, atts[3].site} == {"alpha", "beta"}
    assert f"hedged: also on {atts[3].site}/p" in task.decision
    assert len(alpha.jobs) == len(beta.jobs) == 2  # each copy submitted, once
    # The retry's copies race as the first ones did: the first to start runs.
    sites[atts[3].site].jobs[str(atts[3].job_id)] = JobState.RUNNING
    await o.tick()
    loser = next(a for a in await o.book.load_attempts(task_id) if a.n == 3)
    assert loser.superseded and loser.outrun_by == 4
    assert sites[atts[2].site].cancelled == [str(atts[2].job_id)]


async def test_a_retry_that_must_avoid_a_site_puts_no_copy_there(store: Store) -> None:
    o, alpha, beta = _world(store)
    task_id, atts = await _placed(o, _hedged())
    sites = _sites(alpha, beta)
    for a in reversed(atts):  # unschedulable where each copy went: the retry avoids the last
        (job,) = [j for j, s in sites[a.site].jobs.items() if not s.terminal]
        sites[a.site].jobs[job] = JobState.UNSCHEDULABLE
        await o.tick()
    atts = await o.book.load_attempts(task_id)
    assert len(atts) == 3 and atts[2].copy_of is None  # alone: its only other site is avoided
    assert atts[2].site != atts[0].site
    task = await o.book.load_task(task_id)
    assert "not hedged: no other site can run it" in task.decision


async def test_a_retry_of_a_task_that_is_not_hedged_stays_alone(store: Store) -> None:
    o, alpha, beta = _world(store, hedge=HedgeConfig(copies=1))
    task_id, atts = await _placed(o, _req(command=("echo", "alone")))
    (first,) = atts
    site = _sites(alpha, beta)[first.site]
    site.jobs[str(first.job_id)] = JobState.FAILED
    await o.tick()
    atts = await o.book.load_attempts(task_id)
    assert [(a.n, a.copy_of) for a in atts] == [(1, None), (2, None)]
    assert "hedge" not in (await o.book.load_task(task_id)).decision
