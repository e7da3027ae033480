"""Who hears that work waits for an offline site, and when: a group's agent once per outage
(`group.waiting_for_site`; its children's own events never wake it), never before the wait
has lasted the grace (counted from when the wait began, also after a replan reopened the
task), never for an outage whose event the collector has not written yet, and a `next` that
promises the wake only when the bound continuation lists the event. A real store, real
placement and the real resume-bridge routing; no site is contacted."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from fedhpc.domain import Health, SiteState
from fedhpc.domain.job import JobState
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS, ContinuationSpec, Runtime
from fedhpc.ops.tasks import CancelRequest, GroupChild, ReplanRequest, SubmitGroupRequest
from fedhpc.orchestrator.book import handle
from fedhpc.orchestrator.dispatch import LOGIN_REQUIRED, _attempt
from fedhpc.orchestrator.records import AttemptRecord, TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Placement
from fedhpc.store import Store
from tests.unit.test_offline_wait import ALPHA, BETA, ERROR, _agent, _alpha_down, _woken
from tests.unit.test_placement_world import NOW, env, state
from tests.unit.test_submit_accept import Clock, _orchestrator, _req

ONLY_ALPHA = env(cpus=1, sites_include=["alpha"])


async def _kinds(store: Store) -> list[str]:
    return [e.kind for e in await store.events_after(0, limit=100)]


async def _waiting_group(store: Store, clock: Clock, tmp_path: Path) -> tuple[Orchestrator, str]:
    """A group of three children only alpha, offline, can run (beta answers), with an agent's
    continuation, after one placement pass: every child waits for alpha."""
    o = _orchestrator(store, clock, alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(3))
    req = SubmitGroupRequest(
        objective="sweep",
        children=children,
        envelope=ONLY_ALPHA,
        continuation=_agent(tmp_path / "agent.log"),
    )
    gid = (await o.groups.submit(req, wait_s=0)).group_id
    await o.place_queued()
    return o, gid


async def test_a_group_whose_children_wait_for_an_offline_site_is_told_once_per_outage(
    store: Store, tmp_path: Path
) -> None:
    """Nothing woke it: only single tasks emitted task.waiting_for_site, while each child's
    `next` promised a wake 'once if it is still waiting after a while'."""
    clock = Clock()
    o, gid = await _waiting_group(store, clock, tmp_path)
    view = await o.groups.view(gid, limit=10)
    assert view.counts == {"queued": 3}
    assert all(c.decision.startswith("queued: waiting for alpha") for c in view.children)
    child = await o.book.load_task(view.children[0].task_id)
    answer = await o.answers.hinted(handle(child, None), "get_result")
    assert "once if it is still waiting after a while" in answer.next
    clock.now += timedelta(seconds=60)  # within the grace: nobody
    await o.place_queued()
    assert await _kinds(store) == ["site.offline"]
    for _ in range(3):  # past it: once, however many passes
        clock.now += timedelta(seconds=300)
        await o.place_queued()
    assert await _kinds(store) == ["site.offline", "group.waiting_for_site"]
    (woke,) = await _woken(store, tmp_path)
    assert (woke["event"], woke["group_id"], woke["site"]) == (
        "group.waiting_for_site",
        gid,
        "alpha",
    )
    assert "offline since" in woke["reason"] and "replan each" in woke["hint"]
    assert any("resumes you when the round ends" in step for step in woke["next"])
    # A new outage is a new fact: told again once it has lasted the grace.
    async with store.transaction() as tx:
        await tx.append_event("site.online", "alpha", {"site": "alpha"}, at=clock(), key="on-1")
        await tx.append_event("site.offline", "alpha", {"site": "alpha"}, at=clock(), key="off-2")
    clock.now += timedelta(seconds=301)
    await o.place_queued()
    assert (await _kinds(store)).count("group.waiting_for_site") == 2


async def test_a_continuation_that_does_not_list_the_wait_event_is_not_promised_a_wake(
    store: Store,
) -> None:
    """A continuation registered before the wait events existed keeps its own events list."""
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    old = tuple(
        e
        for e in DEFAULT_WAKE_EVENTS
        if e not in {"task.waiting_for_site", "group.waiting_for_site"}
    )
    spec = ContinuationSpec(runtime=Runtime.COMMAND, command=("true",), events=old)
    submitted = await o.intake.submit_task(_req(fixed_site="alpha", continuation=spec), wait_s=0)
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    answer = await o.answers.hinted(handle(task, None), "submit_task")
    assert answer.next.startswith("Queued, waiting for alpha (offline)")
    assert "once if it is still waiting" not in answer.next
    assert "not while it waits" in answer.next and "get_result(" in answer.next


async def test_no_wake_for_an_outage_whose_event_the_collector_has_not_written_yet(
    store: Store, tmp_path: Path
) -> None:
    """The collector marks a site offline as its probe fails and writes site.offline after the
    whole round: meanwhile the newest site.offline was the previous outage's, two hours old,
    and the task was told 'offline since' then and woken at once."""
    clock = Clock()
    o = _orchestrator(store, clock, alpha=ALPHA, beta=BETA)
    async with store.transaction() as tx:
        old = NOW - timedelta(hours=2)
        await tx.append_event("site.offline", "alpha", {"site": "alpha"}, at=old, key="off-1")
        back = NOW - timedelta(hours=1)
        await tx.append_event("site.online", "alpha", {"site": "alpha"}, at=back, key="on-1")
    o.collector.latest["alpha"] = SiteState(
        site="alpha", health=Health.OFFLINE, collected_at=NOW, error=ERROR
    )
    o.collector.latest["beta"] = state(BETA.profile)
    spec = _agent(tmp_path / "agent.log")
    submitted = await o.intake.submit_task(_req(fixed_site="alpha", continuation=spec), wait_s=0)
    clock.now += timedelta(seconds=400)  # past the grace, counted from the old outage
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    assert task.decision.startswith("queued: waiting for alpha: offline since 2026-11-30 12:00:00")
    assert await _kinds(store) == ["site.offline", "site.online"]
    async with store.transaction() as tx:  # the round is recorded: the outage is known
        await tx.append_event("site.offline", "alpha", {"site": "alpha"}, at=clock(), key="off-2")
    await o.place_queued()
    assert await _kinds(store) == ["site.offline", "site.online", "site.offline"]
    clock.now += timedelta(seconds=300)
    await o.place_queued()
    assert (await _kinds(store))[-1] == "task.waiting_for_site"


async def test_a_replan_that_reopens_a_task_into_a_wait_wakes_nobody_before_the_grace(
    store: Store, tmp_path: Path
) -> None:
    """The reopened task's event is a new fact, and its wait was counted from submission: the
    agent that had just been answered 'waiting' was woken at once."""
    clock = Clock()
    o = _orchestrator(store, clock, alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    spec = _agent(tmp_path / "agent.log")
    submitted = await o.intake.submit_task(
        _req(fixed_site="alpha", envelope=env(gpus=1), continuation=spec), wait_s=0
    )  # alpha has no GPUs: unschedulable at once
    await o.place_queued()
    assert (await o.book.load_task(submitted.task_id)).state is JobState.UNSCHEDULABLE
    clock.now += timedelta(hours=1)
    o.collector.latest["beta"] = state(BETA.profile, age_s=-3600)  # beta answers on
    answer = await o.tools.replan(
        ReplanRequest(task_id=submitted.task_id, envelope=env(cpus=1, gpus=0))
    )
    assert answer.state is JobState.QUEUED
    await o.place_queued()
    task = await o.book.load_task(submitted.task_id)
    assert task.reopened == 1 and task.decision.startswith("queued: waiting for alpha")
    assert "task.waiting_for_site" not in await _kinds(store)
    clock.now += timedelta(seconds=301)
    await o.place_queued()
    assert (await _kinds(store))[-1] == "task.waiting_for_site"


def _scheduler(o: Orchestrator, answer: Callable[[TaskRecord, Placement], AttemptRecord]) -> None:
    """Dispatch as a scheduler that answers `answer` (a refusal: a failed attempt), recorded as
    the dispatcher records an attempt; nothing is submitted anywhere."""

    async def prepare(task: TaskRecord, p: Placement, **_: object) -> AttemptRecord:
        att = answer(task, p)
        task.attempts_made = att.n
        async with o.book.store.transaction() as tx:
            await o.book.save(tx, task, att, at=NOW)
        return att

    setattr(o.placer.submitter.dispatcher, "prepare", prepare)  # noqa: B010 (a scheduler)


async def _dispatch(o: Orchestrator, task: TaskRecord, placed: Placement) -> None:
    """The placer's dispatch of one placed task: its intent under the lock, then the send."""
    async with o.lock:
        await o.placer.submitter.prepare([(task, placed)], None)
    await o.placer.submitter.send()


async def _placed_on_beta(store: Store) -> tuple[Orchestrator, TaskRecord, Placement]:
    """A task alpha (offline) or beta could run, and where placement puts it: beta."""
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    submitted = await o.intake.submit_task(_req(), wait_s=0)
    task = await o.book.load_task(submitted.task_id)
    placed = await o.planner.decide(task)
    assert isinstance(placed, Placement) and placed.site == "beta"
    return o, task, placed


async def test_a_task_refused_where_it_was_placed_waits_when_only_offline_sites_are_left(
    store: Store,
) -> None:
    """The re-decide after a scheduler's refusal made it unschedulable at once, while alpha,
    offline, could run it once back; it waits for alpha now and is never sent to beta again."""
    o, task, placed = await _placed_on_beta(store)
    sent: list[str] = []

    def refuse(task: TaskRecord, p: Placement) -> AttemptRecord:
        sent.append(p.site)  # beta's scheduler refuses what the rules accepted
        why = "sbatch: error: Batch job submission failed: Invalid qos specification"
        n = task.attempts_made + 1
        return _attempt(task, p, n, NOW, state=JobState.FAILED, reason=why, ended_at=NOW)

    _scheduler(o, refuse)
    await _dispatch(o, task, placed)
    task = await o.book.load_task(task.id)
    assert task.state is JobState.QUEUED and task.refused_sites == ("beta",)
    assert "Invalid qos" in task.decision
    await o.place_queued()
    task = await o.book.load_task(task.id)
    assert task.state is JobState.QUEUED and task.decision.startswith("queued: waiting for alpha")
    assert sent == ["beta"]
    assert "task.unschedulable" not in await _kinds(store)


async def test_a_child_a_scheduler_refused_never_lends_its_refusal_to_its_siblings(
    store: Store,
) -> None:
    """beta refused child 0 (say, an undeclared per-user submit limit) while alpha is down: it
    waits for alpha, but its siblings, which beta never refused, still go to beta. Keyed
    alike, the first child of the run decided for all: every sibling waited for alpha (or,
    with another child first, child 0 was sent to beta again every pass)."""
    o = _orchestrator(store, Clock(), alpha=ALPHA, beta=BETA)
    await _alpha_down(o, store)
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(3))
    req = SubmitGroupRequest(objective="sweep", children=children, envelope=env(cpus=1))
    gid = (await o.groups.submit(req, wait_s=0)).group_id
    ids = [c.task_id for c in (await o.groups.view(gid, limit=10)).children]
    first = await o.book.load_task(ids[0])
    placed = await o.planner.decide(first)
    assert isinstance(placed, Placement) and placed.site == "beta"
    sent: list[tuple[str, str]] = []

    def scheduler(task: TaskRecord, p: Placement) -> AttemptRecord:
        sent.append((task.id, p.site))
        n = task.attempts_made + 1
        if task.id == ids[0] and len(sent) == 1:  # beta refuses child 0, once
            why = "sbatch: error: QOSMaxSubmitJobPerUserLimit"
            return _attempt(task, p, n, NOW, state=JobState.FAILED, reason=why, ended_at=NOW)
        return _attempt(task, p, n, NOW, state=JobState.PENDING)

    _scheduler(o, scheduler)
    await _dispatch(o, first, placed)
    assert (await o.book.load_task(ids[0])).refused_sites == ("beta",)
    await o.place_queued()
    assert sorted(sent[1:]) == [(ids[1], "beta"), (ids[2], "beta")]
    child0 = await o.book.load_task(ids[0])
    assert child0.state is JobState.QUEUED
    assert child0.decision.startswith("queued: waiting for alpha")
    # A replan is the agent asking again: beta, which refused it, is a candidate once more.
    answer = await o.tools.replan(ReplanRequest(task_id=ids[0]))
    assert answer.state is not JobState.UNSCHEDULABLE
    assert (await o.book.load_task(ids[0])).refused_sites == ()


async def test_a_group_still_hears_of_its_wait_when_its_first_child_is_gone(
    store: Store, tmp_path: Path
) -> None:
    """The siblings' wait line comes from one statement (`set_queued_decision`) without its
    start; the sibling that became the group's first child set its start in memory only (its
    line unchanged: nothing saved), so every pass counted its wait from zero and the group's
    continuation, promised a wake, never heard."""
    clock = Clock()
    o, gid = await _waiting_group(store, clock, tmp_path)
    ids = [c.task_id for c in (await o.groups.view(gid, limit=10)).children]
    await o.tools.cancel(CancelRequest(task_id=ids[0]))  # the child that spoke for the group
    for _ in range(4):  # well past the grace, one pass at a time
        clock.now += timedelta(seconds=120)
        await o.place_queued()
    assert (await _kinds(store))[-1] == "group.waiting_for_site"


async def test_a_site_that_needs_a_login_is_never_waited_out_the_person_is_asked(
    store: Store,
) -> None:
    """beta needs a Globus login and alpha, the only other site, is down: recorded as a
    refusal, the task waited for alpha, the next pass's wait line replaced the login command,
    and nobody asked the person; it fails now with the command, which wakes the agent."""
    o, task, placed = await _placed_on_beta(store)

    def needs_login(task: TaskRecord, p: Placement) -> AttemptRecord:
        why = f"{LOGIN_REQUIRED}: no Globus tokens for beta. Run `fedhpc login` on this machine"
        n = task.attempts_made + 1
        return _attempt(task, p, n, NOW, state=JobState.FAILED, reason=why, ended_at=NOW)

    _scheduler(o, needs_login)
    await _dispatch(o, task, placed)
    task = await o.book.load_task(task.id)
    assert task.state is JobState.FAILED and task.refused_sites == ()
    assert "fedhpc login" in task.reasons[0]
    assert (await _kinds(store))[-1] == "task.retry_exhausted"
