"""A task that only an offline site could run (a pinned one, above all) waits for it: queued,
with the reason and a true `next`, its agent told once per outage after the grace, and placed
when the site answers again. A site that can never run the envelope is still unschedulable at
once. A real store, real placement and the real resume-bridge routing; no site is contacted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from fedhpc.bridge.service import Bridge
from fedhpc.domain import Health, SiteState
from fedhpc.domain.job import JobState
from fedhpc.ops.continuations import ContinuationSpec, Runtime
from fedhpc.ops.tasks import ReplanRequest, ResultRequest
from fedhpc.orchestrator.book import handle
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state
from tests.unit.test_submit_accept import Clock, _orchestrator, _req

ALPHA = site(profile("alpha", cpu_partition("cpu")))
BETA = site(profile("beta", cpu_partition("cpu")))
WENT = NOW - timedelta(minutes=10)
ERROR = "probe failed: ssh: connect to host alpha port 22: Connection refused"


def _agent(log: Path) -> ContinuationSpec:
    return ContinuationSpec(runtime=Runtime.COMMAND, command=("tee", "-a", str(log)))


async def _alpha_down(o: Orchestrator, store: Store) -> None:
    """alpha's probes fail since WENT (the collector's own event), beta answers."""
    o.collector.latest["alpha"] = SiteState(
        site="alpha", health=Health.OFFLINE, collected_at=NOW, error=ERROR
    )
    o.collector.latest["beta"] = state(BETA.profile)
    async with store.transaction() as tx:
        await tx.append_event("site.offline", "alpha", {"site": "alpha"}, at=WENT, key="off-1")


async def _woken(store: Store, home: Path) -> list[dict[str, Any]]:
    await Bridge(store, home).route()
    return [d["body"]["payload"] for d in await store.deliveries()]


async def test_a_task_pinned_to_an_offline_site_waits_for_it_and_says_why(
    store: Store, tmp_path: Path
) -> None:
    clock = Clock()
    o = _orchestrator(store, clock, alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    req = _req(fixed_site="alpha", continuation=_agent(tmp_path / "agent.log"))
    submitted = await o.intake.submit_task(req, wait_s=0)
    assert await o.place_queued() == 0
    task = await o.book.load_task(submitted.task_id)
    assert task.state is JobState.QUEUED  # not unschedulable: alpha may come back
    assert task.decision.startswith("queued: waiting for alpha: offline since 2026-11-30 11:50:00")
    assert ERROR in task.decision and "places it when alpha answers again" in task.decision
    # The answer says it waits, why, and what the agent may do that is true for a pinned task.
    answer = await o.answers.hinted(handle(task, None), "submit_task")
    assert answer.decision == task.decision
    assert answer.next.startswith("Queued, waiting for alpha (offline)")
    assert "resumes the session that submitted it" in answer.next
    assert "cancel it and submit again with another fixed_site" in answer.next
    assert "replan it" not in answer.next.replace("replan cannot move", "")
    manifest = await o.answers.hinted_result(
        await o.tools.get_result(ResultRequest(task_id=task.id))
    )
    assert manifest.waiting == task.decision and manifest.next == answer.next
    # Waiting is no exception yet: nobody is woken within the grace, however often it is placed.
    clock.now += timedelta(seconds=60)
    await o.place_queued()
    kinds = [e.kind for e in await store.events_after(0, limit=10)]
    assert kinds == ["site.offline"] and await _woken(store, tmp_path) == []
    # Past the grace, once for this outage, however many cycles it lasts.
    for _ in range(3):
        clock.now += timedelta(seconds=300)
        await o.place_queued()
    # Its offline verdict aged past the staleness bound (a failing site is probed less often)
    # and past the missing-data bound: it still waits, and is not unschedulable.
    assert (await o.book.load_task(task.id)).state is JobState.QUEUED
    (woke,) = await _woken(store, tmp_path)
    assert (woke["event"], woke["task_id"], woke["site"]) == (
        "task.waiting_for_site",
        task.id,
        "alpha",
    )
    assert woke["state"] == "queued" and "offline since" in woke["reason"]
    assert "another fixed_site" in woke["hint"]
    # alpha answers again: the task fits there (the placer dispatches it: tests/integration).
    o.collector.latest["alpha"] = state(ALPHA.profile, age_s=-1500)
    clock.now = NOW + timedelta(seconds=1500)
    placed = await o.planner.decide(await o.book.load_task(task.id))
    assert isinstance(placed, Placement) and placed.site == "alpha"


async def test_an_unpinned_task_waits_only_while_no_answering_site_can_run_it(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    alone = TaskRecord(
        id="t1",
        request=_req(envelope=env(cpus=1, sites_exclude=["beta"])),
        idempotency_key="k",
        created_at=NOW,
    )
    submitted = await o.intake.submit_task(alone.request, wait_s=0)
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    assert task.state is JobState.QUEUED and task.decision.startswith("queued: waiting for alpha")
    answer = await o.answers.hinted(handle(task, None), "submit_task")
    assert "replan it with an envelope another site can run, or cancel it" in answer.next


async def test_a_pinned_site_that_can_never_run_the_envelope_is_unschedulable_at_once(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    submitted = await o.intake.submit_task(
        _req(fixed_site="alpha", envelope=env(gpus=1)), wait_s=0
    )  # alpha has no GPUs: its coming back cannot help
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    assert task.state is JobState.UNSCHEDULABLE
    assert [e.kind for e in await store.events_after(0, limit=10)] == [
        "site.offline",
        "task.unschedulable",
    ]


async def test_replanning_a_task_that_waits_for_an_offline_site_changes_it_and_it_waits_on(
    store: Store,
) -> None:
    """It was refused as 'no feasible placement ... relax the envelope', which cannot help."""
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    submitted = await o.intake.submit_task(_req(fixed_site="alpha"), wait_s=0)
    await o.place_queued()
    answer = await o.tools.replan(ReplanRequest(task_id=submitted.task_id, envelope=env(cpus=2)))
    assert answer.state is JobState.QUEUED
    task = await o.book.load_task(submitted.task_id)
    assert task.request.envelope.cpus.min == 2 and task.reopened == 0
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    assert task.state is JobState.QUEUED and task.decision.startswith("queued: waiting for alpha")


async def test_a_staged_task_waiting_for_its_data_site_is_told_it_runs_only_there(
    store: Store,
) -> None:
    """It was told to 'replan it with an envelope another site can run': the planner drops
    every site but its data site, and replan refuses an include of another."""
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    submitted = await o.intake.submit_task(_req(), wait_s=0)
    task = await o.book.load_task(submitted.task_id)
    task.data_site = "alpha"  # its stage-in copied its inputs to alpha
    async with store.transaction() as tx:
        await o.book.save(tx, task, at=NOW)
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    assert task.state is JobState.QUEUED and task.decision.startswith("queued: waiting for alpha")
    answer = await o.answers.hinted(handle(task, None), "submit_task")
    assert "It runs only at alpha, where its inputs are" in answer.next
    assert "move_data its inputs to another site" in answer.next
    assert "replan it with" not in answer.next


async def test_a_site_whose_name_has_a_plus_is_named_in_the_waiting_answer(store: Store) -> None:
    """SAFE_NAME allows '+': the sites waited for, read back from the decision line, were none
    for 'lab+gpu', and the answer's next lost the wait."""
    plus = site(profile("lab+gpu", cpu_partition("cpu")))
    o = _orchestrator(store, Clock(), **{"lab+gpu": plus, "beta": BETA})
    o.collector.latest["lab+gpu"] = SiteState(
        site="lab+gpu", health=Health.OFFLINE, collected_at=NOW, error=ERROR
    )
    o.collector.latest["beta"] = state(BETA.profile)
    submitted = await o.intake.submit_task(_req(fixed_site="lab+gpu"), wait_s=0)
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    assert task.decision.startswith("queued: waiting for lab+gpu: offline since")
    answer = await o.answers.hinted(handle(task, None), "submit_task")
    assert answer.next.startswith("Queued, waiting for lab+gpu (offline)"), answer.next
