"""A leader killed between writing an attempt's end and its task's end: the attempt is no
longer observed (it is not live), so the next leader takes the task through its end when it
begins to lead, once (issue 35's five-kill workload found a task that never completed)."""

from __future__ import annotations

from fedhpc.domain.job import JobState
from fedhpc.placement import PolicyKind
from fedhpc.store import Store
from tests.unit.test_slow_site import _attempt, _bound, _world
from tests.unit.test_submit_accept import _req


async def test_an_end_whose_task_never_heard_is_finished_by_the_next_leader(store: Store) -> None:
    o, _, _ = _world(store)
    req = _req(policy=PolicyKind.FIXED_SITE, fixed_site="fast")
    tid = (await o.intake.submit_task(req, wait_s=0)).task_id
    await o.place_queued()
    att = await _bound(o, tid)
    # The first write of the end, alone: the leader died before the task's own.
    task = await o.book.load_task(tid)
    att.state, att.ended_at = JobState.COMPLETED, o.clock()
    async with store.transaction() as tx:
        await o.book.save(tx, task, att, at=o.clock())
    assert (await o.book.load_task(tid)).state is not JobState.COMPLETED
    async with o.lock:
        assert await o.control.finish_ends() == 1
        assert await o.control.finish_ends() == 0  # once
    assert (await o.book.load_task(tid)).state is JobState.COMPLETED
    ends = await store.events_after(0, kinds=["task.terminal"], limit=10)
    assert [e.subject for e in ends] == [tid]
    assert (await _attempt(o, tid)).state is JobState.COMPLETED
