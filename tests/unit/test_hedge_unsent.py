"""A hedged copy set aside before its lane sends it (another copy started first) is never
sent: no submission and no cancel wasted on it (issue 42). The two-site world of
test_hedging.py: a real store and real placement, fake schedulers the test drives."""

from __future__ import annotations

import pytest

from fedhpc.domain.job import JobState
from fedhpc.store import Store
from tests.unit.test_hedging import _hedged, _sites, _world


async def test_a_copy_set_aside_while_it_waited_for_its_lane_is_never_sent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    o, alpha, beta = _world(store)
    submitter = o.placer.submitter
    real_send = submitter.send

    async def hold() -> None:  # the lanes are busy: what the pass wrote waits in `ready`
        return None

    monkeypatch.setattr(submitter, "send", hold)
    task_id = (await o.intake.submit_task(_hedged(), wait_s=0)).task_id
    await o.place_queued()
    first, second = submitter.ready
    assert first[2].att.n == 1 and second[2].att.n == 2  # type: ignore[union-attr]
    submitter.ready = [first]  # the first copy's lane goes, the second's still waits
    await real_send()
    sites = _sites(alpha, beta)
    started = sites[first[1].site]
    (job,) = started.jobs
    started.jobs[job] = JobState.RUNNING
    await o.tick()  # it started: the waiting copy is set aside, outrun by it
    submitter.ready = [second]
    await real_send()  # the second lane reaches it now
    waited = sites[second[1].site]
    assert waited.jobs == {} and waited.cancelled == []  # neither submitted nor cancelled
    a1, a2 = await o.book.load_attempts(task_id)
    assert not a1.superseded and a2.superseded and a2.outrun_by == 1
    assert a2.state is JobState.CANCELLED and not a2.cancel_pending and a2.job_id is None
    assert not submitter.dispatcher.in_flight and not submitter.hedged
    await o.tick()
    assert waited.jobs == {} and waited.cancelled == []
    started.jobs[job] = JobState.COMPLETED
    await o.tick()
    task = await o.book.load_task(task_id)
    assert task.state is JobState.COMPLETED and task.accepted_attempt == 1
