"""Hedged submission when things go wrong (a review's findings, each shown failing first): a
lost copy's intent after the task ended, both intents lost, a leader killed after a copy's
completed end, a copy's site lost, a copy that cannot be written. The two-site world of
test_hedging.py: a real store and real placement, fake schedulers the test drives."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fedhpc.domain.job import JobState
from fedhpc.domain.site import Health
from fedhpc.store import Store
from tests.unit.test_hedging import BETA, _hedged, _placed, _world
from tests.unit.test_placement_world import env, state

PREFER_ALPHA = env(cpus=1, preferences={"partitions": ["alpha/p"]})


def _later(o: Any) -> None:
    o.clock.now += timedelta(seconds=5)


async def test_a_lost_copys_intent_after_the_task_completed_never_reopens_it(
    store: Store,
) -> None:
    o, alpha, beta = _world(store, grace_s=0)
    beta.lost = True  # beta's sbatch answer never comes back: its intent stays
    task_id, atts = await _placed(o, _hedged().model_copy(update={"envelope": PREFER_ALPHA}))
    assert [(a.site, a.job_id is None) for a in atts] == [("alpha", False), ("beta", True)]
    beta.lost = False
    (job,) = alpha.jobs
    alpha.jobs[job] = JobState.COMPLETED  # a short job: seen ended, accepted
    for _ in range(2):
        _later(o)
        await o.tick()
        await o.place_queued()
    task = await o.book.load_task(task_id)
    assert task.state is JobState.COMPLETED and task.accepted_attempt == 1
    assert len(alpha.jobs) + len(beta.jobs) == 1  # never submitted again
    lost = (await o.book.load_attempts(task_id))[1]
    assert lost.superseded and lost.state is JobState.FAILED


async def test_both_copies_lost_are_placed_again_under_new_attempt_numbers(
    store: Store,
) -> None:
    o, alpha, beta = _world(store, grace_s=0)
    alpha.lost = beta.lost = True  # the daemon died before either sbatch ran
    task_id, _ = await _placed(o, _hedged())
    alpha.lost = beta.lost = False
    for _ in range(3):
        _later(o)
        await o.tick()
        await o.place_queued()
    atts = await o.book.load_attempts(task_id)
    task = await o.book.load_task(task_id)
    assert len({a.n for a in atts}) == len(atts)  # no attempt number reused
    assert task.attempts_made == max(a.n for a in atts)
    rows = {(r["task_id"], r["n"]): r for r in await store.attempts(task_id)}
    for a in atts:  # each row's site is its attempt's (an upsert keeps the first site)
        assert rows[(task_id, a.n)]["site"] == a.site
    live = [a for a in atts if not a.superseded]
    assert len(live) == 2 and all(a.job_id for a in live)


async def test_a_copys_completed_end_saved_before_a_leader_crash_is_the_result(
    store: Store,
) -> None:
    """The leader saved copy 1's end (a short job, never seen running) and was killed before
    it was accepted; copy 2 still waits. The next leader takes copy 1's result."""
    o, _, _ = _world(store)
    task_id, atts = await _placed(o, _hedged())
    first = atts[0]
    first.state, first.ended_at = JobState.COMPLETED, o.clock()
    task = await o.book.load_task(task_id)
    async with store.transaction() as tx:
        await o.book.save(tx, task, first, at=o.clock())
    assert await o.control.finish_ends() == 1
    task = await o.book.load_task(task_id)
    assert task.state is JobState.COMPLETED and task.accepted_attempt == 1
    other = (await o.book.load_attempts(task_id))[1]
    assert other.superseded and other.outrun_by == 1


async def test_a_copy_failing_after_a_missed_completed_end_does_not_fail_the_task(
    store: Store,
) -> None:
    o, alpha, beta = _world(store)
    task_id, (first, second) = await _placed(o, _hedged(max_retries=0))
    first.state, first.ended_at = JobState.COMPLETED, o.clock()
    task = await o.book.load_task(task_id)
    async with store.transaction() as tx:  # saved, then the leader died before accepting it
        await o.book.save(tx, task, first, at=o.clock())
    {"alpha": alpha, "beta": beta}[second.site].jobs[str(second.job_id)] = JobState.FAILED
    await o.tick()
    task = await o.book.load_task(task_id)
    assert task.state is JobState.COMPLETED and task.accepted_attempt == 1


async def test_a_copy_set_aside_on_a_lost_site_is_cancelled_when_the_site_answers(
    store: Store,
) -> None:
    o, _, beta = _world(store)
    task_id, atts = await _placed(o, _hedged().model_copy(update={"envelope": PREFER_ALPHA}))
    assert [a.site for a in atts] == ["alpha", "beta"]
    o.collector.latest["beta"] = state(BETA.profile, health=Health.OFFLINE)
    await o.tick()
    copy = (await o.book.load_attempts(task_id))[1]
    assert copy.superseded and copy.cancel_pending  # owed, saved
    o.collector.latest["beta"] = state(BETA.profile)  # beta answers again
    await o.tick()
    assert beta.cancelled == [str(copy.job_id)]


async def test_a_copy_that_cannot_be_written_is_dropped_and_the_first_one_runs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    o, alpha, beta = _world(store)
    dispatcher = o.placer.submitter.dispatcher
    real = dispatcher.prepare

    async def prepare(task: Any, p: Any, **kw: Any) -> Any:
        if kw.get("copy_of") is not None:
            raise RuntimeError("the copy's row could not be written")
        return await real(task, p, **kw)

    monkeypatch.setattr(dispatcher, "prepare", prepare)
    task_id, atts = await _placed(o, _hedged())
    task = await o.book.load_task(task_id)
    assert task.state is not JobState.FAILED
    assert len(atts) == 1 and atts[0].job_id is not None
    assert len(alpha.jobs) + len(beta.jobs) == 1 and not dispatcher.in_flight


async def test_the_winners_start_and_the_losers_set_aside_are_one_write(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader killed between two writes would leave the start recorded and both copies
    running (the start is never seen again): they are saved in one transaction."""
    o, alpha, beta = _world(store)
    _, atts = await _placed(o, _hedged().model_copy(update={"envelope": PREFER_ALPHA}))
    saved: list[list[tuple[int, bool]]] = []
    real = o.book.save

    async def save(tx: Any, task: Any, *attempts: Any, at: Any) -> None:
        saved.append([(a.n, a.superseded) for a in attempts])
        await real(tx, task, *attempts, at=at)

    monkeypatch.setattr(o.book, "save", save)
    (job,) = alpha.jobs
    alpha.jobs[job] = JobState.RUNNING
    await o.tick()
    assert [(1, False), (2, True)] in saved, saved  # the start and the outrun copy together
    assert beta.cancelled == [str(atts[1].job_id)]
