"""An intent whose submission was lost (the daemon died, or the call's answer never came) and
that the scheduler does not know by name is submitted again. Where placement now picks another
site, the lost intent is set aside and the task is placed again like new work: never counted as
a failed try (no job ever ran), never failed for it, never under the lost job's name (issue 33's
kill -9 burst found tasks with `max_retries=0` failed with "never reached the scheduler")."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import anyio

from fedhpc.domain.job import JobState
from fedhpc.domain.site import Health
from fedhpc.ops.tasks import AdaptationPolicy
from fedhpc.placement import PolicyKind
from fedhpc.store import Store
from tests.unit.test_slow_site import _attempt, _world
from tests.unit.test_submit_accept import Clock, _req


async def test_a_lost_intent_placed_elsewhere_now_is_queued_again_not_failed(
    store: Store,
) -> None:
    o, slow, fast = _world(store, intent_grace_s=0)
    slow.failing.add("submit")  # the answer is lost: the intent stays, outcome unknown
    req = _req(
        policy=PolicyKind.FIXED_SITE,
        fixed_site="slow",
        fallback=True,
        adaptation=AdaptationPolicy(max_retries=0),
    )
    tid = (await o.intake.submit_task(req, wait_s=0)).task_id
    await o.place_queued()
    lost = await _attempt(o, tid)
    assert (lost.site, lost.job_id, lost.state) == ("slow", None, JobState.SUBMITTED)
    # slow is down now: placed again, the task would go to fast (its fallback).
    o.collector.latest["slow"] = o.collector.latest["slow"].model_copy(
        update={"health": Health.OFFLINE}
    )
    task = await o.book.load_task(tid)
    async with o.lock:
        await o.adaptation.resubmit_intent(task, lost)
    task = await o.book.load_task(tid)
    (set_aside,) = await o.book.load_attempts(tid)
    assert task.state is JobState.QUEUED and task.retries_used == 0
    assert set_aside.superseded and set_aside.reason is not None
    assert set_aside.reason.startswith("never reached the scheduler")
    await o.place_queued()
    first, second = await o.book.load_attempts(tid)
    assert (second.n, second.site, second.state) == (2, "fast", JobState.SUBMITTED)
    assert second.job_id is not None and second.job_name != first.job_name
    assert fast.submitted == [second.job_name]
    assert (await o.book.load_task(tid)).state is JobState.SUBMITTED


async def test_an_intent_another_leader_wrote_waits_the_grace_from_the_takeover(
    store: Store,
) -> None:
    """A leader killed mid-submit may leave its scheduler command running, however old the
    intent: the next leader looks it up by name for the whole grace counted from when it
    began to lead, and only then submits it again (once)."""
    o, slow, _ = _world(store, intent_grace_s=30)
    clock = cast(Clock, o.clock)
    slow.failing.add("submit")  # the answer is lost: the intent stays, outcome unknown
    req = _req(policy=PolicyKind.FIXED_SITE, fixed_site="slow")
    tid = (await o.intake.submit_task(req, wait_s=0)).task_id
    await o.place_queued()
    slow.failing.discard("submit")
    lost = await _attempt(o, tid)
    assert lost.job_id is None

    def later(seconds: float) -> None:  # time passes; the sites' views stay fresh
        clock.now += timedelta(seconds=seconds)
        for name, view in o.collector.latest.items():
            o.collector.latest[name] = view.model_copy(update={"collected_at": clock.now})

    later(600)  # the intent is ten minutes old when this process takes over
    o.control.leading_since = clock.now
    later(10)
    await o.tick()
    assert slow.calls["find"] >= 1  # looked up by name
    assert slow.submitted == [lost.job_name]  # the lost try only: not submitted again yet
    later(30)
    await o.tick()
    with anyio.fail_after(10):
        while len(slow.submitted) < 2:
            await anyio.sleep(0.01)
    assert slow.submitted == [lost.job_name] * 2  # again, once, under the same name
