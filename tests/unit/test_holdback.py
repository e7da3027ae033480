"""Per-user job limits: a task whose only obstacle is `max_jobs_per_user` waits in fedhpc
(queued, with the reason), never becomes unschedulable for it, and is released when the
user's jobs there end; the count never forgets a job the last probe cannot show. A real store
and real placement; no site is contacted (tests/integration/test_holdback.py: real Slurm)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio

from fedhpc.domain.job import JobState, Shape
from fedhpc.ops.tasks import GroupChild, ReplanRequest, SubmitGroupRequest
from fedhpc.orchestrator.claims import ENDED_MARGIN_S, Claim, Ended
from fedhpc.orchestrator.holdback import HOLD_PREFIX, held_by_limits
from fedhpc.orchestrator.placer import DATA_WAIT_S
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement, Unschedulable
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state
from tests.unit.test_submit_accept import Clock, _orchestrator, _req

LIMITED = site(profile("alpha", cpu_partition("cpu", max_jobs_per_user=2)))


async def test_a_task_at_the_user_limit_waits_queued_with_the_reason_however_long(
    store: Store,
) -> None:
    clock = Clock()
    o = _orchestrator(store, clock, alpha=LIMITED)
    o.collector.latest["alpha"] = state(LIMITED.profile, cpu={"user_running_jobs": 2})
    task = TaskRecord(id="t1", request=_req(), idempotency_key="k", created_at=NOW)
    u = await o.planner.decide(task)
    assert isinstance(u, Unschedulable)
    assert held_by_limits(o.collector, u, o.claims.ledger()) == ["alpha/cpu: 2 of 2 jobs"]
    handle = await o.intake.submit_task(_req(), wait_s=0)
    clock.now = NOW + timedelta(seconds=DATA_WAIT_S * 3)  # far past the missing-data bound
    o.collector.latest["alpha"] = state(
        LIMITED.profile, cpu={"user_running_jobs": 2}, age_s=-DATA_WAIT_S * 3
    )
    assert await o.place_queued() == 0
    held = await o.book.load_task(handle.task_id)
    assert held.state is JobState.QUEUED
    assert held.decision.startswith(HOLD_PREFIX) and "alpha/cpu: 2 of 2 jobs" in held.decision
    assert await store.events_after(0) == []  # a hold is routine: nobody is woken for it


async def test_another_obstacle_is_not_a_hold(store: Store) -> None:
    o = _orchestrator(store, Clock(), alpha=LIMITED)
    o.collector.latest["alpha"] = state(LIMITED.profile, cpu={"user_running_jobs": 2})
    big = TaskRecord(
        id="t1", request=_req(envelope=env(gpus=1)), idempotency_key="k", created_at=NOW
    )
    u = await o.planner.decide(big)  # no GPUs at alpha: waiting for jobs to end cannot help
    assert isinstance(u, Unschedulable)
    assert held_by_limits(o.collector, u, o.claims.ledger()) == []


async def test_our_jobs_ending_after_the_probe_release_held_work_before_the_next_probe(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock(), alpha=LIMITED)
    probe = state(LIMITED.profile, cpu={"user_running_jobs": 2})
    o.collector.latest["alpha"] = probe
    task = TaskRecord(id="t1", request=_req(), idempotency_key="k", created_at=NOW)
    # A job that ended before (or right at) the probe is already missing from it: no release.
    o.claims.ended.append(Ended("alpha", "cpu", probe.collected_at + timedelta(seconds=1)))
    assert isinstance(await o.planner.decide(task, ledger=o.claims.ledger()), Unschedulable)
    assert o.claims.ended == []
    o.claims.ended.append(
        Ended("alpha", "cpu", probe.collected_at + timedelta(seconds=ENDED_MARGIN_S + 1))
    )
    decision = await o.planner.decide(task, ledger=o.claims.ledger())
    assert not isinstance(decision, Unschedulable)
    assert decision.site == "alpha"


async def test_a_submission_in_flight_while_the_probe_ran_still_counts(store: Store) -> None:
    o = _orchestrator(store, Clock(), alpha=LIMITED)
    probe = state(LIMITED.profile, cpu={"user_running_jobs": 1})
    o.collector.latest["alpha"] = probe
    before = probe.collected_at - timedelta(seconds=1)
    claim = Claim(before, "alpha", "cpu", None, Shape(nodes=1, cpus=1, memory_mib=1024), 0.0)
    # Dispatched before the probe; its sbatch had not returned yet.
    o.claims.dispatched.append(claim)
    assert o.claims.ledger().jobs[("alpha", "cpu")] == 1
    claim.done = probe.collected_at + timedelta(seconds=1)  # accepted after squeue ran
    assert o.claims.ledger().jobs[("alpha", "cpu")] == 1
    claim.done = before  # accepted before the probe started: the probe shows it
    assert o.claims.ledger().jobs.get(("alpha", "cpu"), 0) == 0


async def test_a_large_group_view_pages_its_children(store: Store) -> None:
    o = _orchestrator(store, Clock())
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(450))
    req = SubmitGroupRequest(objective="sweep", children=children, envelope=env(cpus=1))
    gid = (await o.groups.submit(req, wait_s=0)).group_id
    seen: list[str] = []
    after = None
    while True:
        page = await o.groups.view(gid, limit=200, after=after)
        assert page.counts == {"queued": 450} and page.size == 450  # always the whole group
        seen += [c.task_id for c in page.children]
        assert page.omitted == 450 - len(page.children)
        if page.next_after is None:
            break
        assert page.next_after == page.children[-1].task_id
        after = page.next_after
    assert len(seen) == 450 == len(set(seen))
    assert seen == sorted(seen)


async def test_a_held_group_costs_one_placement_per_pass_and_every_child_shows_why(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock(), alpha=LIMITED)
    o.collector.latest["alpha"] = state(LIMITED.profile, cpu={"user_running_jobs": 2})
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(100))
    req = SubmitGroupRequest(objective="sweep", children=children, envelope=env(cpus=1))
    gid = (await o.groups.submit(req, wait_s=0)).group_id
    decide, placements = o.planner.decide, 0

    async def counted(task: TaskRecord, **kw: Any) -> Placement | Unschedulable:
        nonlocal placements
        placements += 1
        return await decide(task, **kw)

    setattr(o.planner, "decide", counted)  # noqa: B010 (a counting wrapper around the real method)
    assert await o.place_queued() == 0
    assert placements == 1  # not 100: the younger siblings wait with the eldest's reason
    view = await o.groups.view(gid, limit=1000)
    assert view.counts == {"queued": 100}
    assert all(c.decision.startswith(HOLD_PREFIX) for c in view.children)


async def test_single_tasks_asking_the_same_wait_together(store: Store) -> None:
    o = _orchestrator(store, Clock(), alpha=LIMITED)
    o.collector.latest["alpha"] = state(LIMITED.profile, cpu={"user_running_jobs": 2})
    same = [await o.intake.submit_task(_req(command=("echo", str(i))), wait_s=0) for i in range(40)]
    other = await o.intake.submit_task(_req(envelope=env(cpus=2)), wait_s=0)
    decide, placements = o.planner.decide, 0

    async def counted(task: TaskRecord, **kw: Any) -> Placement | Unschedulable:
        nonlocal placements
        placements += 1
        return await decide(task, **kw)

    setattr(o.planner, "decide", counted)  # noqa: B010 (a counting wrapper around the real method)
    assert await o.place_queued() == 0
    assert placements == 2  # one for the 40 alike (only the command differs), one for `other`
    for h in [*same, other]:
        t = await o.book.load_task(h.task_id)
        assert t.state is JobState.QUEUED and t.decision.startswith(HOLD_PREFIX)


async def test_at_most_submits_per_cycle_new_jobs_go_to_a_site_in_one_control_cycle(
    store: Store,
) -> None:
    alpha = site(profile("alpha", cpu_partition("cpu")))
    beta = site(profile("beta", cpu_partition("cpu")))
    o = _orchestrator(store, Clock(), alpha=alpha, beta=beta)
    o.planner.submits_per_cycle = 3
    o.collector.latest.update(alpha=state(alpha.profile), beta=state(beta.profile))
    handles = [
        await o.intake.submit_task(_req(command=("echo", str(i))), wait_s=0) for i in range(10)
    ]
    await o.place_queued()  # no adapter here: the dispatches fail, the bound is what counts
    assert o.planner.placed_this_cycle == {"alpha": 3, "beta": 3}
    tasks = [await o.book.load_task(h.task_id) for h in handles]
    waiting = [t for t in tasks if t.state is JobState.QUEUED]
    assert len(waiting) == 4
    assert sorted(t.id for t in waiting) == sorted(t.id for t in tasks)[6:]  # oldest first
    assert all("FEDHPC_SUBMITS_PER_CYCLE" in t.decision for t in waiting)
    o.count_cycle()  # the next control cycle
    await o.place_queued()
    assert sum(o.planner.placed_this_cycle.values()) == 4
    later = [await o.book.load_task(t.id) for t in waiting]
    assert all(t.state is not JobState.QUEUED for t in later)


def test_fedhpc_task_shows_why_a_queued_task_waits() -> None:
    from fedhpc.cli.tasks import _manifest_text
    from fedhpc.ops.task_views import ResultManifest

    line = f"{HOLD_PREFIX} (alpha/cpu: 2 of 2 jobs); fedhpc submits it as your jobs there finish"
    text = _manifest_text(ResultManifest(task_id="t1", state=JobState.QUEUED, waiting=line))
    assert text.splitlines() == ["task t1: queued", line]


def _bounded(store: Store) -> Orchestrator:
    """alpha (128-CPU nodes) already took this cycle's one submission; beta has 32-CPU nodes."""
    alpha = site(profile("alpha", cpu_partition("cpu")))
    beta = site(profile("beta", cpu_partition("cpu", cpus=32)))
    o = _orchestrator(store, Clock(), alpha=alpha, beta=beta)
    o.collector.latest.update(alpha=state(alpha.profile), beta=state(beta.profile))
    o.planner.submits_per_cycle = 1
    o.planner.placed_this_cycle["alpha"] = 1
    return o


async def test_a_task_no_site_can_run_is_unschedulable_even_while_a_site_is_at_its_bound(
    store: Store,
) -> None:
    o = _bounded(store)
    # No GPUs anywhere.
    impossible = await o.intake.submit_task(_req(envelope=env(gpus=1)), wait_s=0)
    only_alpha = await o.intake.submit_task(_req(envelope=env(cpus=64)), wait_s=0)
    await o.place_queued()
    gone = await o.book.load_task(impossible.task_id)
    assert gone.state is JobState.UNSCHEDULABLE  # not "placed next cycle" for ever
    assert "FEDHPC_SUBMITS_PER_CYCLE" not in gone.decision
    assert [e.kind for e in await store.events_after(0)] == ["task.unschedulable"]
    waits = await o.book.load_task(only_alpha.task_id)
    assert waits.state is JobState.QUEUED  # fits alpha, which counts again next cycle
    assert "FEDHPC_SUBMITS_PER_CYCLE" in waits.decision and "alpha" in waits.decision


async def test_a_group_no_site_can_run_is_unschedulable_even_while_a_site_is_at_its_bound(
    store: Store,
) -> None:
    o = _bounded(store)
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(3))
    impossible = SubmitGroupRequest(
        objective="sweep", children=children, envelope=env(gpus=1), spread=False
    )
    gid = (await o.groups.submit(impossible, wait_s=0)).group_id
    only_alpha = SubmitGroupRequest(
        objective="sweep", children=children, envelope=env(cpus=64), spread=False
    )
    waiting = (await o.groups.submit(only_alpha, wait_s=0)).group_id
    await o.place_queued()
    assert (await o.groups.view(gid, limit=10)).counts == {"unschedulable": 3}
    view = await o.groups.view(waiting, limit=10)
    assert view.counts == {"queued": 3}
    assert all("FEDHPC_SUBMITS_PER_CYCLE" in c.decision for c in view.children)


async def test_a_replanned_child_of_a_held_group_is_placed_on_its_own(store: Store) -> None:
    beta = site(profile("beta", cpu_partition("cpu", cpus=32)))
    o = _orchestrator(store, Clock(), alpha=LIMITED, beta=beta)
    o.collector.latest.update(
        alpha=state(LIMITED.profile, cpu={"user_running_jobs": 2}), beta=state(beta.profile)
    )
    # 40 children: the youngest is in the pass's second batch, where held groups are skipped.
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(40))
    req = SubmitGroupRequest(objective="sweep", children=children, envelope=env(cpus=64))
    gid = (await o.groups.submit(req, wait_s=0)).group_id  # only alpha's nodes are that big
    assert await o.place_queued() == 0
    view = await o.groups.view(gid, limit=100)
    assert all(c.decision.startswith(HOLD_PREFIX) for c in view.children)
    youngest = await o.book.load_task(view.children[-1].task_id)
    youngest.state = JobState.UNSCHEDULABLE  # as when its data never came, say
    async with store.transaction() as tx:
        await o.book.save(tx, youngest, at=NOW)
    wake = o.placer.wake_event = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            o.tools.replan,
            ReplanRequest(task_id=youngest.id, exclude_sites=("alpha",), envelope=env(cpus=16)),
        )
        await wake.wait()  # back in the queue, for the placer
        await o.place_queued()
    assert o.planner.placed_this_cycle == {"beta": 1}  # read and placed, not held with its siblings
    moved = await o.book.load_task(youngest.id)
    assert moved.state is not JobState.QUEUED and "alpha" not in moved.decision
    rest = await o.groups.view(gid, limit=100)
    assert rest.counts["queued"] == 39
    assert all(c.decision.startswith(HOLD_PREFIX) for c in rest.children if c.task_id != moved.id)
