"""A task waiting for a stage-in that is blocked on a person (expired credentials, missing
consent) tells its agent why, with the transfer's hint, once per block; the task keeps waiting.
The real TransferService, Orchestrator staging and resume-bridge routing over one store;
Globus answered by the SDK's own registered responses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedhpc.bridge.service import Bridge
from fedhpc.collector import Collector
from fedhpc.domain import JobState, ResourceEnvelope
from fedhpc.ops.continuations import DEFAULT_WAKE_EVENTS, ContinuationSpec, Runtime
from fedhpc.ops.data import MoveDataRequest, TransferState
from fedhpc.ops.tasks import SubmitTaskRequest
from fedhpc.orchestrator import staging
from fedhpc.orchestrator.service import Orchestrator
from fedhpc.store import Store
from fedhpc.transfer.service import TransferService
from tests.unit.globus_world import (
    globus_backend,
    globus_sites,
    mocked_http,  # noqa: F401 (autouse: Globus answered offline)
    task_status,
    transfer_accepted,
)

TRANSFER_EVENTS = ("transfer.succeeded", "transfer.failed", "transfer.blocked")
ENV = ResourceEnvelope.model_validate({"wall_time": {"min": "5m"}})


def _agent(log: Path, events: tuple[str, ...] = DEFAULT_WAKE_EVENTS) -> ContinuationSpec:
    return ContinuationSpec(runtime=Runtime.COMMAND, command=("tee", "-a", str(log)), events=events)


def _globus(*statuses: str) -> None:
    """An accepted submit, then one task status per poll (the last one repeats)."""
    transfer_accepted()
    for status in statuses:
        extra = (
            {"nice_status": "AUTH", "nice_status_short_description": "endpoint credentials expired"}
            if status == "INACTIVE"
            else {}
        )
        task_status(status, **extra)


class World:
    def __init__(self, store: Store, home: Path) -> None:
        sites = globus_sites()
        self.store = store
        self.transfers = TransferService(
            store, sites, home=home, backends={"globus": globus_backend()}
        )
        self.o = Orchestrator(store, Collector(sites, {}, store), {})
        self.bridge = Bridge(store, home)

    async def cycle(self) -> None:
        """One transfer cycle, then one orchestrator staging pass."""
        await self.transfers.tick()
        await staging.advance(self.o.book, self.o.placer.wake)

    async def move(self, agent: ContinuationSpec) -> str:
        req = MoveDataRequest(
            source="delta:work/p/in.dat", destination="polaris:eagle/p/in.dat", continuation=agent
        )
        handle = await self.transfers.move_data(req)
        assert handle.state is TransferState.ACTIVE
        return handle.transfer_id

    async def submit(self, tid: str, agent: ContinuationSpec) -> str:
        req = SubmitTaskRequest(
            command=("wc", "-c", "in.dat"), envelope=ENV, stage_in=(tid,), continuation=agent
        )
        handle, _ = await self.o.intake.accept_task(req)
        assert handle.state is JobState.SUBMITTED
        return handle.task_id

    async def woken(self) -> list[dict[str, Any]]:
        await self.bridge.route()
        return [d["body"]["payload"] for d in await self.store.deliveries()]

    async def kinds(self) -> list[tuple[str, str]]:
        return [(e.kind, e.subject) for e in await self.store.events_after(0, limit=100)]


async def test_a_blocked_stage_in_wakes_the_waiting_tasks_agent_once_per_block(
    tmp_path: Path, store: Store
) -> None:
    _globus("INACTIVE", "INACTIVE", "ACTIVE", "INACTIVE")
    w = World(store, tmp_path)
    log = tmp_path / "agent.log"
    # The skill's order: move_data, then submit_task(stage_in=...) at once; one agent, two
    # continuations (the transfer's and the task's).
    tid = await w.move(_agent(log, TRANSFER_EVENTS))
    task = await w.submit(tid, _agent(log))
    await w.cycle()  # blocked on credentials
    await w.cycle()  # still the same block: nothing new
    (woke,) = await w.woken()
    assert (woke["event"], woke["task_id"], woke["transfer_id"]) == (
        "task.stage_in_blocked",
        task,
        tid,
    )
    assert woke["state"] == "submitted"
    assert "fedhpc login" in woke["hint"]
    assert "blocked" in woke["reason"] and "AUTH" in woke["reason"]
    assert any("hint" in step for step in woke["next"])
    # Told through the task only: the move_data caller is the same agent, not woken twice.
    assert ("transfer.blocked", tid) not in await w.kinds()
    assert (await w.o.book.load_task(task)).state is JobState.SUBMITTED  # it keeps waiting
    await w.cycle()  # the person logged in: the copy goes on
    assert len(await w.woken()) == 1
    await w.cycle()  # blocked again later: a new block, told once more
    await w.cycle()
    kinds = await w.kinds()
    assert kinds.count(("task.stage_in_blocked", task)) == 2
    assert [p["event"] for p in await w.woken()] == ["task.stage_in_blocked"] * 2


async def test_a_block_before_any_task_waits_goes_to_the_mover_and_then_to_a_new_task(
    tmp_path: Path, store: Store
) -> None:
    """Blocked with nobody waiting: the move_data caller hears `transfer.blocked`; a task
    submitted on it afterwards hears why it waits, once."""
    _globus("INACTIVE")
    w = World(store, tmp_path)
    tid = await w.move(_agent(tmp_path / "mover.log", TRANSFER_EVENTS))
    await w.cycle()
    assert [p["event"] for p in await w.woken()] == ["transfer.blocked"]
    task = await w.submit(tid, _agent(tmp_path / "task.log"))
    await w.cycle()
    await w.cycle()
    woken = await w.woken()
    assert [(p["event"], p.get("task_id")) for p in woken] == [
        ("transfer.blocked", None),
        ("task.stage_in_blocked", task),
    ]
