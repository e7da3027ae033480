"""replan of a task still waiting for its stage-in: it changes the envelope and exclusions the
task will be placed with, but never dispatches it before its input arrived; excluding the one
site its input is copied to is refused with a typed error. A real store, real placement and
the real staging pass; no site is contacted (no adapter: a dispatch would fail the task)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from fedhpc.collector import Collector
from fedhpc.domain.job import JobState
from fedhpc.errors import FedError
from fedhpc.ops.data import DataLocation, TransferState
from fedhpc.ops.tasks import ReplanRequest, SubmitTaskRequest
from fedhpc.orchestrator import staging
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from fedhpc.transfer import records
from fedhpc.transfer.records import TransferRecord
from tests.unit.test_placement_world import NOW, cpu_partition, env, profile, site, state


def _loc(name: str) -> DataLocation:
    return DataLocation(site=name, root="scratch", root_path="/s", path="/s/run/in.dat")


async def _world(store: Store) -> tuple[Orchestrator, str]:
    sites = {n: site(profile(n, cpu_partition("cpu"))) for n in ("alpha", "beta")}
    o = Orchestrator(store, Collector(sites, {}, store, clock=lambda: NOW), {}, clock=lambda: NOW)
    for s in sites.values():
        o.collector.latest[s.profile.name] = state(s.profile)
    copy = TransferRecord(
        id="x000000000a1",
        idempotency_key="k1",
        mode="stage",
        source_ref="beta:scratch/run/in.dat",
        destination_ref="alpha:scratch/run/in.dat",
        source=_loc("beta"),
        destination=_loc("alpha"),
        backend="local",
        state=TransferState.ACTIVE,
        created_at=NOW,
    )
    async with store.transaction() as tx:
        await records.put(tx, copy, at=NOW)
    return o, copy.id


async def _waiting_task(o: Orchestrator, tid: str, **kw: Any) -> str:
    req = SubmitTaskRequest(
        command=("wc", "-c", "in.dat"), envelope=env(cpus=1), stage_in=(tid,), **kw
    )
    handle, _ = await o.intake.accept_task(req)
    assert handle.state is JobState.SUBMITTED
    return handle.task_id


async def _arrive(o: Orchestrator, tid: str) -> None:
    async with o.store.transaction() as tx:
        rec = await records.get(tx, tid)
        assert rec is not None
        rec.state, rec.completed_at = TransferState.SUCCEEDED, datetime.now(NOW.tzinfo)
        await records.put(tx, rec, at=NOW)


async def test_replanning_a_task_that_waits_for_its_input_does_not_dispatch_it(
    store: Store,
) -> None:
    o, tid = await _world(store)
    task_id = await _waiting_task(o, tid)
    handle = await o.tools.replan(ReplanRequest(task_id=task_id, envelope=env(cpus=2)))
    assert handle.state is JobState.SUBMITTED
    assert handle.site is None and handle.attempt == 0
    assert "placed when its input arrives" in handle.decision
    task = await o.book.load_task(task_id)
    assert task.state is JobState.SUBMITTED
    assert task.request.envelope == env(cpus=2)
    assert task.excluded_sites == ("beta",)  # still only where the input lands
    assert await store.attempts(task_id) == []
    assert await store.events_after(0) == []
    await staging.advance(o.book, o.placer.wake)  # the copy is still running: it keeps waiting
    assert (await o.book.load_task(task_id)).state is JobState.SUBMITTED
    await _arrive(o, tid)
    await staging.advance(o.book, o.placer.wake)  # now it goes to placement, with the new envelope
    queued = await o.book.load_task(task_id)
    assert queued.state is JobState.QUEUED
    assert queued.request.envelope == env(cpus=2)


async def test_excluding_the_site_its_input_goes_to_is_a_typed_refusal_and_changes_nothing(
    store: Store,
) -> None:
    o, tid = await _world(store)
    task_id = await _waiting_task(o, tid)
    before = await o.book.load_task(task_id)
    with pytest.raises(FedError) as exc:
        await o.tools.replan(
            ReplanRequest(task_id=task_id, exclude_sites=("alpha",), envelope=env(cpus=2))
        )
    err = exc.value.as_dict()
    assert err["code"] == "stage_in_pending"
    assert "waits for its input" in err["message"] and "alpha" in err["message"]
    assert "move_data" in err["hint"]
    assert await o.book.load_task(task_id) == before
    assert await store.attempts(task_id) == []
