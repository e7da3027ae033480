"""Replan of a task whose job is pending at a scheduler, when only offline sites could run the
replanned task: fedhpc never gives up a pending job for a wait, and the answer says exactly
that (it said both "wait for the site" and "relax the envelope", never the reason). A real
store and real placement; the scheduler is a stand-in that leaves every job pending."""

from __future__ import annotations

import pytest

from fedhpc.domain.job import JobState
from fedhpc.ops.tasks import ReplanRequest
from fedhpc.orchestrator.dispatch import _attempt
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.replan_checks import WouldWait
from fedhpc.placement import Placement
from fedhpc.store import Store
from tests.unit.test_offline_wait import ALPHA, BETA, _alpha_down
from tests.unit.test_placement_world import NOW, env
from tests.unit.test_submit_accept import Clock, _orchestrator, _req


async def test_a_pending_job_is_not_given_up_for_a_wait_and_the_refusal_says_so(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)

    async def scheduler(task: TaskRecord, p: Placement, **_: object) -> AttemptRecord:
        att = _attempt(task, p, task.attempts_made + 1, NOW, state=JobState.PENDING)
        att.job_id = f"{4240 + att.n}"  # a job id the scheduler gave
        task.attempts_made, task.state = task.attempts_made + 1, JobState.PENDING
        async with store.transaction() as tx:
            await o.book.save(tx, task, att, at=NOW)
        return att

    # The dispatcher's first step answers at once, as a scheduler that took the job would.
    setattr(o.placer.submitter.dispatcher, "prepare", scheduler)  # noqa: B010 (a scheduler)
    submitted = await o.intake.submit_task(_req(), wait_s=0)
    await o.place_queued()
    before = await o.book.load_task(submitted.task_id)
    assert before.state is not JobState.QUEUED
    job = (await o.book.load_attempts(before.id))[-1]
    assert (job.site, job.state) == ("beta", JobState.PENDING)
    for req in (
        ReplanRequest(task_id=before.id, exclude_sites=("beta",)),
        ReplanRequest(task_id=before.id, envelope=env(cpus=1, sites_include=("alpha",))),
    ):
        with pytest.raises(WouldWait) as err:
            await o.tools.replan(req)
        body = err.value.as_dict()
        assert body["code"] == "replan_would_wait" and err.value.kind.value == "conflict"
        assert body["message"] == (
            f"task {before.id} was not replanned: as asked, only alpha could run it, which is "
            f"offline, and fedhpc does not give up its pending job {job.job_id} at beta to wait "
            "for an offline site"
        )
        assert "Relax the envelope" not in body["hint"] and "wait for the site" not in str(body)
        assert body["hint"].startswith("The task is unchanged and its job stays pending.")
        assert "cancel the task and submit it again" in body["hint"]
    after = await o.book.load_task(before.id)
    assert (after.state, after.excluded_sites, after.request) == (
        JobState.PENDING,
        (),
        before.request,
    )
    assert [(a.job_id, a.superseded) for a in await o.book.load_attempts(before.id)] == [
        ("4241", False)
    ]
    # With an online site able to run it, the same kind of replan moves the job.
    moved = await o.tools.replan(ReplanRequest(task_id=before.id, envelope=env(cpus=2)))
    assert moved.site == "beta" and moved.attempt == 2
