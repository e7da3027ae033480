"""Accepting submissions: durable and at once (queued), retries recognised by key or by the
retry window (not by history), groups with derived child ids, and missing site data held as a
wait rather than `unschedulable`. A real store and real placement; no site is contacted."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.ops.tasks import GroupChild, SubmitGroupRequest, SubmitTaskRequest
from fedhpc.orchestrator import idem
from fedhpc.orchestrator.accept import WAITING_FOR_PROBES
from fedhpc.orchestrator.batching import missing_data
from fedhpc.orchestrator.groups import group_id_for
from fedhpc.orchestrator.records import TaskRecord
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Unschedulable
from fedhpc.store import Store
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def _orchestrator(store: Store, clock: Clock, **sites: Any) -> Orchestrator:
    collector = Collector(sites, {}, store, clock=clock)
    return Orchestrator(store, collector, {}, clock=clock, retry_window_s=120)


def _req(**kw: Any) -> SubmitTaskRequest:
    base: dict[str, Any] = {"command": ("echo", "hi"), "envelope": env(cpus=1)}
    return SubmitTaskRequest.model_validate(base | kw)


def _retry(key: str, caller: str = "serve:a") -> dict[str, Any]:
    """What the MCP server sends: a key made for the call, and who calls."""
    return {"idempotency_key": key, "key_generated": True, "caller": caller}


async def test_a_submit_is_queued_and_answered_before_any_probe(store: Store) -> None:
    o = _orchestrator(store, Clock())
    handle = await o.intake.submit_task(_req(), wait_s=0)
    assert handle.state is JobState.QUEUED
    assert handle.decision == WAITING_FOR_PROBES
    assert handle.existing is None
    row = await store.get_task(handle.task_id)
    assert row is not None and row["state"] == "queued"  # durable before the answer


async def test_the_same_call_retried_returns_the_same_task_and_says_so(store: Store) -> None:
    clock = Clock()
    o = _orchestrator(store, clock)
    first = await o.intake.submit_task(_req(**_retry("mcp-1")), wait_s=0)
    clock.now += timedelta(seconds=30)
    # A new call, same arguments.
    again = await o.intake.submit_task(_req(**_retry("mcp-2")), wait_s=0)
    assert again.task_id == first.task_id
    assert again.existing is not None
    assert first.task_id in again.existing and "retry window" in again.existing
    assert "queued" in again.existing
    assert await store.count("tasks") == 1


async def test_the_same_request_after_the_window_is_new_work(store: Store) -> None:
    clock = Clock()
    o = _orchestrator(store, clock)
    first = await o.intake.submit_task(_req(**_retry("mcp-1")), wait_s=0)
    clock.now += timedelta(seconds=121)
    later = await o.intake.submit_task(_req(**_retry("mcp-2")), wait_s=0)
    assert later.task_id != first.task_id
    assert later.existing is None


async def test_another_caller_with_the_same_arguments_gets_its_own_task(store: Store) -> None:
    o = _orchestrator(store, Clock())
    a = await o.intake.submit_task(_req(**_retry("mcp-1", caller="codex:a")), wait_s=0)
    b = await o.intake.submit_task(_req(**_retry("mcp-2", caller="codex:b")), wait_s=0)
    assert a.task_id != b.task_id


async def test_an_explicit_key_returns_the_same_task_at_any_age(store: Store) -> None:
    clock = Clock()
    o = _orchestrator(store, clock)
    first = await o.intake.submit_task(_req(idempotency_key="sweep-7"), wait_s=0)
    clock.now += timedelta(days=3)
    again = await o.intake.submit_task(_req(idempotency_key="sweep-7"), wait_s=0)
    assert again.task_id == first.task_id
    assert again.existing is not None and "the same idempotency_key" in again.existing


async def test_a_new_explicit_key_is_new_work_even_within_the_window(store: Store) -> None:
    o = _orchestrator(store, Clock())
    a = await o.intake.submit_task(_req(idempotency_key="run-1"), wait_s=0)
    b = await o.intake.submit_task(_req(idempotency_key="run-2"), wait_s=0)
    assert a.task_id != b.task_id


async def test_a_key_reused_for_other_arguments_is_a_conflict(store: Store) -> None:
    o = _orchestrator(store, Clock())
    await o.intake.submit_task(_req(idempotency_key="k"), wait_s=0)
    with pytest.raises(idem.IdempotencyConflict) as err:
        await o.intake.submit_task(_req(idempotency_key="k", command=("echo", "bye")), wait_s=0)
    assert err.value.code == "idempotency_conflict"


async def test_a_retry_of_a_finished_task_says_the_result_is_available_now(store: Store) -> None:
    o = _orchestrator(store, Clock())
    first = await o.intake.submit_task(_req(idempotency_key="done"), wait_s=0)
    task = await o.book.load_task(first.task_id)
    task.state = JobState.COMPLETED
    async with store.transaction() as tx:
        await o.book.save(tx, task, at=NOW)
    again = await o.intake.submit_task(_req(idempotency_key="done"), wait_s=0)
    assert again.state is JobState.COMPLETED
    assert again.existing is not None and "completed" in again.existing
    assert "available now" in again.next and first.task_id in again.next
    assert "End your turn" not in again.next


async def test_a_group_is_accepted_with_every_child_queued_under_derived_ids(
    store: Store,
) -> None:
    o = _orchestrator(store, Clock())
    children = tuple(GroupChild(command=("echo", str(i))) for i in range(150))
    req = SubmitGroupRequest(
        objective="sweep", children=children, envelope=env(cpus=1), idempotency_key="g-150"
    )
    view = await o.groups.submit(req, wait_s=0)
    gid = group_id_for("g-150")
    prefix = "t" + gid[1:]
    assert view.group_id == gid
    assert (view.size, view.state, view.counts) == (150, "placing", {"queued": 150})
    assert view.child_ids == f"{prefix}-000 … {prefix}-149"
    assert [c.task_id for c in view.children[:2]] == [f"{prefix}-000", f"{prefix}-001"]
    assert len(view.children) + view.omitted == 150 and view.omitted > 0
    rows = await store.group_children(gid)
    assert [r["id"] for r in rows] == [f"{prefix}-{i:03d}" for i in range(150)]
    last = await store.get_task(f"{prefix}-149")
    assert last is not None
    record = TaskRecord.model_validate(last["body"])  # what the placer reads back
    assert (record.request.command, record.group_id) == (("echo", "149"), gid)
    assert record.idempotency_key == record.request.idempotency_key == "g-150:child:149"
    again = await o.groups.submit(req, wait_s=0)
    assert again.group_id == gid and again.existing is not None
    assert await store.count("tasks") == 150


async def test_a_retried_group_call_within_the_window_is_the_same_group(store: Store) -> None:
    o = _orchestrator(store, Clock())
    children = (GroupChild(command=("true",)),)
    a = await o.groups.submit(
        SubmitGroupRequest(objective="o", children=children, envelope=env(cpus=1), **_retry("m1")),
        wait_s=0,
    )
    b = await o.groups.submit(
        SubmitGroupRequest(objective="o", children=children, envelope=env(cpus=1), **_retry("m2")),
        wait_s=0,
    )
    assert a.group_id == b.group_id
    assert b.existing is not None and "retry window" in b.existing


async def test_missing_site_data_is_a_wait_but_an_impossible_request_is_not(store: Store) -> None:
    alpha = site(profile("alpha", cpu_partition("cpu")))
    o = _orchestrator(store, Clock(), alpha=alpha)
    task = TaskRecord(id="t1", request=_req(), idempotency_key="k", created_at=NOW)
    no_data = await o.planner.decide(task)  # the collector has not probed alpha yet
    assert isinstance(no_data, Unschedulable)
    assert missing_data(o.collector, no_data) == ["alpha"]
    impossible = task.model_copy(update={"request": _req(envelope=env(gpus=1))})
    never = await o.planner.decide(impossible)  # alpha has no GPUs: no probe can change that
    assert isinstance(never, Unschedulable)
    assert missing_data(o.collector, never) == []
    o.collector.latest["alpha"] = state(alpha.profile)
    assert not isinstance(await o.planner.decide(task), Unschedulable)


async def test_a_probe_that_could_not_read_the_accounts_holds_the_task(store: Store) -> None:
    """The CI failure of stop 45: a rate-limited sshare left a site's first view without
    accounts, and a task for a site that needs one was declared unschedulable ("add one under
    sites...") where it only had to wait for the next probe."""
    prof = profile("alpha", cpu_partition("cpu"))
    conventions = prof.conventions.model_copy(update={"account_required": True})
    alpha = site(prof.model_copy(update={"conventions": conventions}))
    o = _orchestrator(store, Clock(), alpha=alpha)
    o.collector.latest["alpha"] = state(alpha.profile, accounts=(), unread=("accounts",))
    handle = await o.intake.submit_task(_req(), wait_s=0)
    await o.place_queued()
    held = await o.book.load_task(handle.task_id)
    assert held.state is JobState.QUEUED
    assert held.decision.startswith("queued: waiting for fresh data from alpha")
    o.collector.latest["alpha"] = state(alpha.profile, accounts=("proj",))
    assert await o.place_queued() == 1


async def test_the_placer_holds_a_task_without_site_data_then_gives_up_after_its_bound(
    store: Store,
) -> None:
    from fedhpc.orchestrator.placer import DATA_WAIT_S

    clock = Clock()
    alpha = site(profile("alpha", cpu_partition("cpu")))
    o = _orchestrator(store, clock, alpha=alpha)
    handle = await o.intake.submit_task(_req(), wait_s=0)
    assert await o.place_queued() == 0  # alpha never probed: nothing to place on yet
    held = await o.book.load_task(handle.task_id)
    assert held.state is JobState.QUEUED
    assert held.decision.startswith("queued: waiting for fresh data from alpha")
    assert await store.events_after(0) == []
    clock.now += timedelta(seconds=DATA_WAIT_S + 1)
    await o.place_queued()
    gone = await o.book.load_task(handle.task_id)
    assert gone.state is JobState.UNSCHEDULABLE
    assert "no fresh data from alpha" in gone.reasons[0]
    assert [e.kind for e in await store.events_after(0)] == ["task.unschedulable"]


async def test_an_impossible_request_is_unschedulable_at_once(store: Store) -> None:
    alpha = site(profile("alpha", cpu_partition("cpu")))
    o = _orchestrator(store, Clock(), alpha=alpha)
    handle = await o.intake.submit_task(_req(envelope=env(gpus=1)), wait_s=0)
    await o.place_queued()
    task = await o.book.load_task(handle.task_id)
    assert task.state is JobState.UNSCHEDULABLE


async def test_a_dispatch_that_raises_fails_only_its_own_task_and_wakes_its_agent(
    store: Store,
) -> None:
    alpha = site(profile("alpha", cpu_partition("cpu")))
    o = _orchestrator(store, Clock(), alpha=alpha)  # placed on alpha, but no adapter for it
    o.collector.latest["alpha"] = state(alpha.profile)
    first = await o.intake.submit_task(_req(name="a"), wait_s=0)
    second = await o.intake.submit_task(_req(name="b", command=("echo", "b")), wait_s=0)
    await o.place_queued()  # before: the KeyError escaped and cancelled the whole batch
    for handle in (first, second):
        task = await o.book.load_task(handle.task_id)
        assert task.state is JobState.FAILED
        assert task.reasons[0].startswith("could not submit to alpha: internal: KeyError")
    kinds = [e.kind for e in await store.events_after(0)]
    assert kinds == ["task.retry_exhausted", "task.retry_exhausted"]


async def test_a_submit_waits_for_its_placement_as_long_as_the_daemon_is_set_to(
    store: Store,
) -> None:
    """FEDHPC_PLACE_WAIT_S (`place_wait_s`) bounds the wait of a submit's answer for its
    placement: a loaded daemon may be given longer, so that answers still name their site."""
    waits: list[tuple[list[str], float]] = []

    async def wait_placed(ids: list[str], wait_s: float) -> None:
        waits.append((ids, wait_s))

    collector = Collector({}, {}, store, clock=Clock())
    o = Orchestrator(store, collector, {}, clock=Clock(), place_wait_s=30)
    o.intake.deps = replace(o.intake.deps, wait_placed=wait_placed)
    handle = await o.intake.submit_task(_req())
    assert waits == [([handle.task_id], 30)]
    await o.intake.submit_task(_req(command=("echo", "now")), wait_s=0)  # a caller's own bound
    assert len(waits) == 1
    assert o.tools.place_wait_s == 30  # replan's answer waits as long
