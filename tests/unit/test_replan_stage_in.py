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
from fedhpc.orchestrator.replan_checks import check_exclusions
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.placement import Unschedulable
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
        command=("wc", "-c", "in.dat"), stage_in=(tid,), **{"envelope": env(cpus=1), **kw}
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


@pytest.mark.parametrize(
    ("include", "said"),
    [
        (("beta",), "rule out"),  # an include outranks the exclusion of beta: no input there
        (("alpha", "beta"), "also names beta"),
    ],
)
async def test_a_new_envelope_that_includes_another_site_is_refused_while_it_waits(
    store: Store, include: tuple[str, ...], said: str
) -> None:
    """replan(envelope=sites_include [beta]) passed: the include outranked the task's exclusion
    of beta, and once its input arrived at alpha it ran on beta without it."""
    o, tid = await _world(store)
    task_id = await _waiting_task(o, tid)
    before = await o.book.load_task(task_id)
    with pytest.raises(FedError) as exc:
        await o.tools.replan(
            ReplanRequest(task_id=task_id, envelope=env(cpus=1, sites_include=include))
        )
    err = exc.value.as_dict()
    assert err["code"] == "usage"
    assert "the inputs arrive at alpha" in err["message"] and said in err["message"], err
    assert "alpha" in err["hint"] and "move_data" in err["hint"]
    assert await o.book.load_task(task_id) == before


async def test_a_submission_whose_include_names_a_site_besides_the_arrival_is_refused(
    store: Store,
) -> None:
    o, tid = await _world(store)
    with pytest.raises(FedError) as exc:
        await _waiting_task(o, tid, envelope=env(cpus=1, sites_include=("alpha", "beta")))
    err = exc.value.as_dict()
    assert err["code"] == "usage"
    assert "sites_include also names beta" in err["message"]
    assert "sites_include [alpha]" in err["hint"]


async def test_an_include_of_a_site_the_task_excluded_earlier_is_refused_naming_it(
    store: Store,
) -> None:
    """Once its input arrived the task no longer waits, but it still runs only at alpha (beta
    excluded at submission): a new include of beta would outrank that exclusion."""
    o, tid = await _world(store)
    task_id = await _waiting_task(o, tid)
    await _arrive(o, tid)
    await staging.advance(o.book, o.placer.wake)
    queued = await o.book.load_task(task_id)
    assert queued.state is JobState.QUEUED and queued.excluded_sites == ("beta",)
    with pytest.raises(FedError) as exc:
        await o.tools.replan(
            ReplanRequest(task_id=task_id, envelope=env(cpus=1, sites_include=("beta",)))
        )
    err = exc.value.as_dict()
    assert err["code"] == "usage"
    assert f"names beta, which task {task_id} already excludes (its stage-in" in err["message"]
    assert "leaves beta out" in err["hint"] and "unchanged" in err["hint"]
    assert await o.book.load_task(task_id) == queued
    # An earlier replan's exclusion is named as such.
    plain = queued.model_copy(
        update={"request": queued.request.model_copy(update={"stage_in": ()})}
    )
    with pytest.raises(FedError) as exc:
        check_exclusions(plain, (), env(cpus=1, sites_include=("beta",)))
    assert "(an earlier replan's exclude_sites)" in exc.value.as_dict()["message"]
    check_exclusions(plain, (), env(cpus=1, sites_include=("alpha",)))  # no contradiction


async def _arrived_then_gamma(store: Store) -> tuple[Orchestrator, str]:
    """A task whose input arrived at alpha (queued), then a site gamma joins the federation
    (config.toml and a daemon restart): no exclusion made at submission names it."""
    o, tid = await _world(store)
    task_id = await _waiting_task(o, tid)
    await _arrive(o, tid)
    await staging.advance(o.book, o.placer.wake)
    gamma = site(profile("gamma", cpu_partition("cpu", cpus=256)))
    o.collector.sites["gamma"] = gamma
    o.collector.latest["gamma"] = state(gamma.profile)
    task = await o.book.load_task(task_id)
    assert task.state is JobState.QUEUED and "gamma" not in task.excluded_sites
    return o, task_id


@pytest.mark.parametrize("stored_before_data_site", [False, True])
async def test_an_include_of_a_site_added_since_submission_is_refused_where_the_data_is_not(
    store: Store, stored_before_data_site: bool
) -> None:
    """replan(envelope=sites_include [gamma]) passed: gamma was in no exclusion, and the task
    would have run there without its input."""
    o, task_id = await _arrived_then_gamma(store)
    if stored_before_data_site:  # a record from before `data_site`: the transfer tells
        old = (await o.book.load_task(task_id)).model_copy(update={"data_site": None})
        async with store.transaction() as tx:
            await o.book.save(tx, old, at=NOW)
    before = await o.book.load_task(task_id)
    with pytest.raises(FedError) as exc:
        await o.tools.replan(
            ReplanRequest(task_id=task_id, envelope=env(cpus=1, sites_include=("gamma",)))
        )
    err = exc.value.as_dict()
    assert err["code"] == "stage_in_site"
    assert f"task {task_id} runs only at alpha" in err["message"]
    assert "sites_include names gamma, where its inputs are not" in err["message"]
    assert "sites_include of [alpha] or none" in err["hint"] and "move_data" in err["hint"]
    assert await o.book.load_task(task_id) == before
    with pytest.raises(FedError) as exc:  # nor may alpha be excluded now that its input is there
        await o.tools.replan(ReplanRequest(task_id=task_id, exclude_sites=("alpha",)))
    assert exc.value.as_dict()["code"] == "stage_in_site"
    assert "excluding alpha leaves it nowhere to run" in exc.value.as_dict()["message"]


async def test_placement_never_uses_a_site_added_since_submission_for_staged_work(
    store: Store,
) -> None:
    o, task_id = await _arrived_then_gamma(store)
    task = await o.book.load_task(task_id)
    _, drop = o.planner.envelope(task)
    assert drop == ("beta", "gamma")
    decision = await o.planner.decide(task)
    assert not isinstance(decision, Unschedulable) and decision.site == "alpha"
    # alpha's partition goes down: gamma, with room to spare, is still no place for it.
    o.collector.latest["alpha"] = state(
        o.collector.sites["alpha"].profile, cpu={"available": False}
    )
    assert isinstance(await o.planner.decide(task), Unschedulable)
